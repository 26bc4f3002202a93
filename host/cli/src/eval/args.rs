//! `eval`'s command line, and what it sets up once: the plugin, its config, the rollout
//! settings, the seeds and the sampling, from the options or from a training config.

use super::records::Settings;
use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use vagen_model::{DType, DeviceChoice};
use vagen_rollout::{EpisodeShape, Format, RolloutConfig};
use vagen_runtime::Plugin;
use vagen_trainer::TrainConfig;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PolicyChoice {
    /// A local model (`--model`, `--adapter`).
    Model,
    /// Any OpenAI-compatible chat endpoint (`--base-url`, `--model` its name).
    Openai,
    /// Random actions (a baseline).
    Random,
    /// The env's expert answers (a ceiling).
    Oracle,
}

#[derive(Args)]
pub struct EvalArgs {
    /// Who answers.
    #[arg(long, value_enum, default_value_t = PolicyChoice::Model)]
    pub policy: PolicyChoice,
    /// For `--policy model`: a model folder (e.g. RUN/checkpoints/step-000100/actor; a LoRA
    /// run's is an adapter folder, which loads over the base it names) or `default`. For
    /// `--policy openai`: the model's name at the endpoint.
    #[arg(long, required_if_eq_any = [("policy", "model"), ("policy", "openai")])]
    pub model: Option<String>,
    /// A LoRA adapter folder (PEFT's layout) over `--model`.
    #[arg(long)]
    pub adapter: Option<PathBuf>,
    /// For `--policy openai`: the endpoint's base URL (…/v1): `vagen-host serve`, vLLM,
    /// SGLang, a hosted API.
    #[arg(long, required_if_eq("policy", "openai"))]
    pub base_url: Option<String>,
    /// For `--policy openai`: the environment variable holding the API key, sent to
    /// `--base-url` (without it, `~/.config/vagen/judge.toml`'s, only to the hosts it allows).
    #[arg(long)]
    pub api_key_env: Option<String>,
    /// For `--policy openai`: requests in flight at once.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// For `--policy openai`: attempts after the first on a connection error, a timeout, a
    /// 429 or a 5xx answer, waiting 0.5 s, then twice as long each time.
    #[arg(long, default_value_t = 4)]
    pub retries: usize,
    /// For `--policy openai`: seconds one attempt may take.
    #[arg(long, default_value_t = 120.0)]
    pub timeout_s: f64,
    /// For `--policy openai`: at most this many requests a minute (0: no limit).
    #[arg(long, default_value_t = 0)]
    pub requests_per_minute: usize,
    /// A training config (e.g. RUN/config.toml): its plugin, env config, rollout settings,
    /// held-out seeds, evaluation temperature and sandbox limits, as the run's own
    /// evaluations. Other options then only override the seeds, samples and temperature.
    #[arg(long, conflicts_with_all = ["plugin", "format", "max_new_tokens", "max_turns", "env_config", "limits"])]
    pub config: Option<PathBuf>,
    #[arg(long, required_unless_present = "config")]
    pub plugin: Option<PathBuf>,
    /// Seeds to play (default 256, or the config's `env.val_episodes`).
    #[arg(long)]
    pub episodes: Option<usize>,
    /// Seed i is S + i; keep it away from the training seeds (default 2^40, as the trainer's
    /// held-out seeds, or the config's `env.val_seed_start`).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Answers per seed: success is averaged over them (avg@n) and pass@k estimated for
    /// k ≤ n (Chen et al.'s unbiased estimator).
    /// Default 1, or the config's `env.val_samples`.
    #[arg(short = 'n', long = "samples")]
    pub samples: Option<usize>,
    #[arg(long, default_value = "free-think")]
    pub format: String,
    /// Sampling temperature (0: greedy). Default 0 for one sample, 1 for several (or the
    /// config's `rollout.val_temperature`).
    #[arg(long)]
    pub temperature: Option<f64>,
    #[arg(long, default_value_t = 128)]
    pub max_new_tokens: usize,
    #[arg(long)]
    pub max_turns: Option<u32>,
    #[arg(long, default_value = "")]
    pub env_config: String,
    #[arg(long, default_value = "auto")]
    pub device: DeviceChoice,
    #[arg(long, default_value = "f32")]
    pub dtype: DType,
    /// Sandbox limit override, e.g. `--limit call_timeout_ms=500` (repeatable; with
    /// `--config`, the config's `[sandbox]` table holds them).
    #[arg(long = "limit", value_name = "KEY=VALUE")]
    pub limits: Vec<String>,
    /// With `--config`: let its `env.plugin` name a native `.so`, which runs unsandboxed.
    #[arg(long, requires = "config")]
    pub allow_native: bool,
    /// Episodes played at once (a model's batch; instances alive together).
    #[arg(long, default_value_t = 16)]
    pub parallel: usize,
    /// The run fails (after writing its files) when more than this share of its episodes
    /// failed in the env; episodes lost to an endpoint are counted apart.
    #[arg(long, default_value_t = 0.25)]
    pub max_failure_rate: f64,
    /// A folder for results.jsonl, summary.json, report.html and the episodes' images.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Finish `--out`'s run: play only the episodes it lacks or lost to the endpoint, with
    /// the settings it was started with (refused, naming them, when they differ).
    #[arg(long, requires = "out")]
    pub resume: bool,
    /// Print the summary as one JSON line.
    #[arg(long)]
    pub json: bool,
}

/// What every episode shares, set up once.
pub struct Setup {
    pub plugin: std::sync::Arc<dyn Plugin>,
    pub plugin_path: PathBuf,
    pub env_config: String,
    pub rollout: RolloutConfig,
    pub shape: EpisodeShape,
    pub seed_start: u64,
    pub seeds: usize,
    pub samples: usize,
    pub temperature: f64,
    pub max_new_tokens: usize,
    pub max_failure_rate: f64,
    /// Episodes played at once.
    pub parallel: usize,
    /// `--config`'s, read once.
    pub train: Option<TrainConfig>,
}

/// `--config`'s training config, with `--episodes` and `--seed` applied; read once.
pub fn read_config(a: &EvalArgs) -> Result<Option<TrainConfig>> {
    let Some(path) = &a.config else { return Ok(None) };
    let mut overrides: Vec<String> = a.episodes.map(|n| format!("env.val_episodes={n}")).into_iter().collect();
    overrides.extend(a.seed.map(|s| format!("env.val_seed_start={s}")));
    Ok(Some(TrainConfig::from_file(path, &overrides)?))
}

/// What every evaluation refuses whatever it plays: no samples, a failure share outside [0, 1].
pub fn check_args(a: &EvalArgs) -> Result<()> {
    if a.samples == Some(0) {
        anyhow::bail!("-n 0: at least one sample a seed");
    }
    if !(0.0..=1.0).contains(&a.max_failure_rate) {
        anyhow::bail!("--max-failure-rate {}: a share between 0 and 1", a.max_failure_rate);
    }
    Ok(())
}

impl Setup {
    /// The setup of `a`; `cfg` is `--config`'s, from [`read_config`].
    pub fn from_args(a: &EvalArgs, cfg: Option<TrainConfig>) -> Result<Self> {
        check_args(a)?;
        let default_temperature = if a.samples.unwrap_or(1) > 1 { 1.0 } else { 0.0 };
        let setup = match cfg {
            Some(cfg) => Self::from_config(a, a.config.as_deref().expect("read from --config"), cfg)?,
            None => {
                let path = a.plugin.clone().expect("clap requires --plugin without --config");
                let format = Format::from_name(&a.format).with_context(|| {
                    let names: Vec<&str> = Format::ALL.iter().map(|f| f.name()).collect();
                    format!("--format {:?}: expected one of {}", a.format, names.join(", "))
                })?;
                let plugin = vagen_env::limits_arg::load(&path, vagen_env::limits_arg::limits_from(&a.limits)?)?;
                Setup {
                    plugin,
                    plugin_path: path,
                    env_config: a.env_config.clone(),
                    rollout: RolloutConfig { format, ..Default::default() },
                    shape: EpisodeShape::groups_of(1).with_max_turns(a.max_turns.unwrap_or(0)),
                    seed_start: a.seed.unwrap_or(1 << 40),
                    seeds: a.episodes.unwrap_or(256),
                    samples: a.samples.unwrap_or(1),
                    temperature: a.temperature.unwrap_or(default_temperature),
                    max_new_tokens: a.max_new_tokens,
                    max_failure_rate: a.max_failure_rate,
                    parallel: a.parallel,
                    train: None,
                }
            }
        };
        super::check_sampling(a.policy, setup.samples, setup.temperature)?;
        Ok(setup)
    }

    fn from_config(a: &EvalArgs, path: &std::path::Path, cfg: TrainConfig) -> Result<Self> {
        let runtime = vagen_runtime::Runtime::new(cfg.sandbox.clone())?;
        let plugin = runtime
            .load_named_in_with(&cfg.env.plugin, path, a.allow_native, cfg.env.openenv.clone().unwrap_or_default())
            .with_context(|| format!("loading {}", cfg.env.plugin.display()))?;
        let temperature = a.temperature.unwrap_or(cfg.rollout.sampling.val_temperature);
        Ok(Setup {
            plugin,
            plugin_path: cfg.env.plugin.clone(),
            env_config: cfg.env_config_json(),
            rollout: cfg.rollout.rollout_config(),
            shape: vagen_trainer::held_out_shape(&cfg),
            seed_start: cfg.env.val_seed_start,
            seeds: cfg.env.val_episodes,
            samples: a.samples.unwrap_or(cfg.env.val_samples),
            temperature,
            max_new_tokens: cfg.rollout.sampling.max_new_tokens,
            max_failure_rate: cfg.env.max_failure_rate,
            parallel: a.parallel,
            train: Some(cfg),
        })
    }

    /// The run's settings, as `summary.json` records them and `--resume` checks them.
    pub fn settings(&self, a: &EvalArgs, model: super::records::ModelIdentity) -> Settings {
        let (m, info) = (self.plugin.manifest(), self.plugin.info());
        Settings {
            env: super::records::EnvIdentity {
                name: m.name.clone(),
                version: m.version.clone(),
                sha256: info.sha256.clone(),
                plugin: self.plugin_path.display().to_string(),
            },
            env_config: self.env_config.clone(),
            rollout: serde_json::to_value(&self.rollout).expect("plain data"),
            max_turns: self.plugin.max_turns(self.shape.max_turns.map(std::num::NonZeroU32::get)),
            seed_start: self.seed_start,
            seeds: self.seeds,
            samples: self.samples,
            temperature: self.temperature,
            max_new_tokens: self.max_new_tokens,
            policy: format!("{:?}", a.policy).to_lowercase(),
            model,
            config: a.config.as_ref().map(|p| p.display().to_string()),
        }
    }
}
