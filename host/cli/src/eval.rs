//! `vagen-host eval`: a model's success on held-out seeds, through the rollout path; with
//! `--config`, exactly as a training run evaluates.

use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::rc::Rc;
use vagen_env::policy::PolicyKind;
use vagen_env::run::RunArgs;
use vagen_model::{DType, DeviceChoice, ModelSource};
use vagen_trainer::TrainConfig;

#[derive(Args)]
pub struct EvalArgs {
    /// A model folder (e.g. RUN/checkpoints/step-000100/actor; a LoRA run's is an adapter
    /// folder, which loads over the base it names) or `default`.
    #[arg(long)]
    model: ModelSource,
    /// A LoRA adapter folder (PEFT's layout) over `--model`.
    #[arg(long)]
    adapter: Option<PathBuf>,
    /// A training config (e.g. RUN/config.toml): its plugin, env config, rollout settings
    /// (format, system prompt, state description, per-turn prompts), held-out seeds and
    /// evaluation temperature and sandbox limits (`[sandbox]`), as the run's own evaluations.
    /// Other options then only override the episodes and the first seed.
    #[arg(
        long,
        conflicts_with_all = ["plugin", "format", "temperature", "max_new_tokens", "max_turns", "env_config", "limits"]
    )]
    config: Option<PathBuf>,
    #[arg(long, required_unless_present = "config")]
    plugin: Option<PathBuf>,
    /// Default 256, or the config's `env.val_episodes`.
    #[arg(long)]
    episodes: Option<usize>,
    /// Episode i uses seed S + i; keep it away from the training seeds (default 2^40, as
    /// the trainer's held-out seeds, or the config's `env.val_seed_start`).
    #[arg(long)]
    seed: Option<u64>,
    #[arg(long, default_value = "free-think")]
    format: String,
    /// 0: greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f64,
    #[arg(long, default_value_t = 128)]
    max_new_tokens: usize,
    #[arg(long)]
    max_turns: Option<u32>,
    #[arg(long, default_value = "")]
    env_config: String,
    #[arg(long, default_value = "auto")]
    device: DeviceChoice,
    #[arg(long, default_value = "f32")]
    dtype: DType,
    /// Sandbox limit override, e.g. `--limit call_timeout_ms=500` (repeatable; with
    /// `--config`, the config's `[sandbox]` table holds them).
    #[arg(long = "limit", value_name = "KEY=VALUE")]
    limits: Vec<String>,
    /// With `--config`: let its `env.plugin` name a native `.so`, which runs unsandboxed.
    #[arg(long, requires = "config")]
    allow_native: bool,
    #[arg(long)]
    out: Option<PathBuf>,
    #[arg(long)]
    json: bool,
}

pub fn eval(a: EvalArgs) -> Result<()> {
    if let Some(path) = &a.config {
        return eval_as_trained(&a, path);
    }
    vagen_env::run::run(
        RunArgs {
            plugin: a.plugin,
            replay: None,
            max_failure_rate: 0.25,
            policy: PolicyKind::Model,
            episodes: a.episodes.unwrap_or(256),
            seed: a.seed.unwrap_or(1 << 40),
            env_config: a.env_config,
            max_turns: a.max_turns,
            out: a.out,
            json: a.json,
            parallel: None,
            limits: a.limits,
            format: Some(a.format),
            group_size: 1,
            history: "all".into(),
            model: a.model.to_string(),
            adapter: a.adapter,
            device: a.device.to_string(),
            dtype: a.dtype.to_string(),
            temperature: a.temperature,
            max_new_tokens: a.max_new_tokens,
            context_overflow: Default::default(),
            allow_native: false,
        },
        &crate::model_policy::make,
    )
}

fn eval_as_trained(a: &EvalArgs, path: &std::path::Path) -> Result<()> {
    let mut overrides: Vec<String> = a.episodes.map(|n| format!("env.val_episodes={n}")).into_iter().collect();
    overrides.extend(a.seed.map(|s| format!("env.val_seed_start={s}")));
    let mut cfg = TrainConfig::from_file(path, &overrides)?;
    // Typed, not written back as TOML: any path, quoted or not, stays the path given.
    (cfg.model.path, cfg.model.device, cfg.model.dtype) = (a.model.clone(), a.device, a.dtype);
    let runtime = vagen_runtime::Runtime::new(cfg.sandbox.clone())?;
    let plugin = runtime
        .load_named_in_with(&cfg.env.plugin, path, a.allow_native, cfg.env.openenv.clone().unwrap_or_default())
        .with_context(|| format!("loading {}", cfg.env.plugin.display()))?;
    let mut model = vagen_trainer::load_model(&cfg, plugin.as_ref())?;
    if let Some(dir) = &a.adapter {
        model.load_adapter(dir).with_context(|| format!("loading the adapter {}", dir.display()))?;
    }
    let model = Rc::new(model);
    let outcome = vagen_trainer::held_out_rollouts(&cfg, plugin.as_ref(), model)?;
    let trajs = &outcome.trajectories;
    let m = vagen_rollout::metrics(trajs);
    if let Some(out) = &a.out {
        let lines: Vec<String> = trajs.iter().map(serde_json::to_string).collect::<Result<_, _>>()?;
        std::fs::write(out, lines.join("\n") + "\n").with_context(|| format!("writing {}", out.display()))?;
    }
    if a.json {
        println!("{}", serde_json::to_string(&m)?);
    } else {
        println!("{} on {} held-out seeds from {}", a.model, m.episodes, cfg.env.val_seed_start);
        println!("  success rate    {:.3}", m.success);
        println!("  mean turns      {:.2}", m.mean_turns);
        println!("  format correct  {:.3}", m.format_correct_rate);
        if let Some(out) = &a.out {
            println!("  episodes        {}", out.display());
        }
    }
    // Judged as the run's own evaluations are (`env.max_failure_rate`).
    outcome.verdict.map_err(|e| anyhow::anyhow!("{e} (env.max_failure_rate in {})", path.display()))
}
