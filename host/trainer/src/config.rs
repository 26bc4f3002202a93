//! The training run's configuration: one TOML file, every field documented here, unknown
//! fields rejected, `--set a.b=c` overrides applied to the TOML before it is read.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use vagen_algo::{AdvantageConfig, Estimator, FilterConfig};
use vagen_model::{DType, DeviceChoice, ModelSource};
use vagen_runtime::{LimitError, Limits};

use crate::{PolicyLossConfig, ValueLossConfig};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    pub env: EnvSection,
    #[serde(default)]
    pub model: ModelSection,
    #[serde(default)]
    pub rollout: crate::RolloutSection,
    /// The generation engine for rollouts: `kind` (`continuous`, default, or `static`),
    /// `max_batch` (64), `max_prefill_tokens` (16384), `kv_cache_mib` (4096), `reuse`
    /// (true); each documented in `vagen_model::EngineOptions`.
    #[serde(default)]
    pub engine: vagen_model::EngineOptions,
    /// Reward functions (`[[reward]]` entries), each scoring every turn of a step's
    /// episodes; see `rewards.rs`.
    #[serde(default, rename = "reward")]
    pub rewards: Vec<RewardSection>,
    /// The judge reward functions may ask (`[judge]`); without one their requests fail.
    #[serde(default)]
    pub judge: Option<JudgeSection>,
    #[serde(default)]
    pub algorithm: AlgorithmSection,
    #[serde(default)]
    pub optim: OptimSection,
    #[serde(default)]
    pub schedule: ScheduleSection,
    #[serde(default)]
    pub sft: SftSection,
    #[serde(default)]
    pub critic: CriticSection,
    /// The plugin's sandbox, under the names of `vagen-host --limit` (each documented, with
    /// its default, in `vagen_runtime::Limits`): `call_timeout_ms`, `create_timeout_ms`,
    /// `memory_mib`, `fuel_millions_per_call`, `output_bytes`, `max_text_bytes`,
    /// `max_images`, `max_image_pixels`, `max_metrics`. Training and `vagen-host eval
    /// --config` load the plugin under them; a native plugin gets only the output and
    /// observation caps (it runs unsandboxed).
    #[serde(default)]
    pub sandbox: Limits,
    /// Data-parallel ranks (`[distributed]`: `backend` auto | gloo | nccl, `timeout_s`);
    /// read only when a launcher (torchrun, Slurm, `--nproc`) started several ranks.
    #[serde(default)]
    pub distributed: vagen_dist::DistributedConfig,
    /// Rollouts ahead of the update (`[async] max_staleness`, 0: synchronous); see
    /// `generator.rs`.
    #[serde(default, rename = "async")]
    pub asynchronous: crate::generator::AsyncSection,
    /// The GPU this rank takes when ranks share a machine's (`cuda:LOCAL_RANK`); set when
    /// joining, never written: a resumed run may have another world size.
    #[serde(skip)]
    pub rank_device: Option<vagen_model::DeviceChoice>,
    /// Whether `env.plugin` may name a native `.so` (unsandboxed code). Never read from a
    /// config file, which may come from someone else: only the command line's
    /// `--allow-native` sets it.
    #[serde(skip)]
    pub allow_native: bool,
    /// What an `openai` judge may reach and the key it may send: from the command line or
    /// the user's `judge.toml`, never from a config file (see `judge_access.rs`).
    #[serde(skip)]
    pub judge_access: crate::JudgeAccess,
    /// Whether the config (or a `--set`) gave `rollout.max_new_tokens`: without it, a run
    /// of the embedded model takes it from the env's oracle (`vocabulary.rs`).
    #[serde(skip)]
    pub max_new_tokens_given: bool,
}

/// A reward function and how much its turn rewards count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RewardSection {
    /// The component (`.wasm` exporting `vagen:env/reward`); relative to the config file's
    /// folder.
    pub plugin: PathBuf,
    /// Its config, as a TOML table (sent to the component as JSON).
    #[serde(default)]
    pub config: toml::Table,
    /// Multiplies its turn rewards before they join the env's (1).
    #[serde(default = "one")]
    pub weight: f64,
}

fn one() -> f64 {
    1.0
}

/// Who answers reward functions' judge requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "backend", rename_all = "kebab-case", deny_unknown_fields)]
pub enum JudgeSection {
    /// A model of ours through the rollout engine, every request of a call in one batch.
    Local {
        /// A Hugging Face folder, `default` or `default-vl` (`@SEED` to draw another).
        #[serde(default = "embedded_model")]
        model: ModelSource,
        /// `auto`, `cpu`, `cuda` or `cuda:N`: the judge's own device.
        #[serde(default)]
        device: DeviceChoice,
        #[serde(default)]
        dtype: DType,
    },
    /// An OpenAI-compatible `/v1/chat/completions` endpoint (vLLM, SGLang, `vagen-host
    /// serve`, a hosted API), answers cached in `RUN/judge-cache/`.
    Openai {
        /// The base URL, e.g. `http://127.0.0.1:8000/v1`.
        url: String,
        /// The `model` field of every request.
        model: String,
        /// Refused when set: the API key's variable is the user's to name
        /// (`--judge-key-env`, or `~/.config/vagen/judge.toml`), never a config's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        api_key_env: Option<String>,
        /// Requests in flight at once.
        #[serde(default = "eight")]
        concurrency: usize,
        /// 0: no limit.
        #[serde(default)]
        requests_per_minute: usize,
        #[serde(default = "sixty")]
        timeout_s: f64,
        /// Attempts after the first (connection errors, timeouts, 429, 5xx), waiting
        /// 0.5 s, 1 s, 2 s, ... between them.
        #[serde(default = "three")]
        retries: usize,
        /// Keep answers in `RUN/judge-cache/` (a resumed run asks nothing twice).
        #[serde(default = "yes")]
        cache: bool,
    },
}

fn eight() -> usize {
    8
}

fn sixty() -> f64 {
    60.0
}

fn three() -> usize {
    3
}

fn yes() -> bool {
    true
}

fn embedded_model() -> ModelSource {
    ModelSource::Embedded { vision: false, seed: None }
}

/// Which environment, with which seeds, in which batch shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvSection {
    /// The plugin file (`.wasm` or `.so`); relative to the config file's folder (a `--set`
    /// one to the working folder). Or an OpenEnv server, `openenv+http://HOST:PORT`.
    pub plugin: PathBuf,
    /// The env's config, as a TOML table (sent to the plugin as JSON; to an OpenEnv
    /// server, as extra arguments of every reset).
    #[serde(default)]
    pub config: toml::Table,
    /// For an `openenv+http://` plugin: how answers and observations map onto the
    /// server's schema, timeouts and retries (`vagen_runtime::OpenEnvOptions`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub openenv: Option<vagen_runtime::OpenEnvOptions>,
    /// Keys of `config` replaced for training episodes (SFT and RL) only; evaluation runs
    /// `config` as written. RAGEN's separate train / val env configs: e.g. train on maps
    /// with more holes than the held-out ones, so the turns that need care are common.
    #[serde(default)]
    pub train_config: toml::Table,
    /// Training seeds: step s uses groups `seed_start + s·groups …`; they never reach
    /// `val_seed_start`.
    #[serde(default)]
    pub train_seed_start: u64,
    /// Held-out seeds for evaluation: `val_seed_start …` for `val_episodes` episodes.
    #[serde(default = "default_val_seed_start")]
    pub val_seed_start: u64,
    #[serde(default = "default_val_episodes")]
    pub val_episodes: usize,
    /// Groups per step (distinct seeds).
    #[serde(default = "default_groups")]
    pub groups: usize,
    /// Episodes per group (same seed).
    #[serde(default = "default_group_size")]
    pub group_size: usize,
    /// Turns per episode; 0: the env's default.
    #[serde(default)]
    pub max_turns: u32,
    /// Actions per turn; 0: the env's limit.
    #[serde(default)]
    pub max_actions_per_turn: usize,
    /// A step whose share of failed trajectories (env faults) is above this stops the run,
    /// naming the plugin and a reproducer file. Failed trajectories never enter an update.
    #[serde(default = "default_max_failure_rate")]
    pub max_failure_rate: f64,
}

fn default_max_failure_rate() -> f64 {
    0.25
}

fn default_val_seed_start() -> u64 {
    1 << 40
}
fn default_val_episodes() -> usize {
    256
}
fn default_groups() -> usize {
    8
}
fn default_group_size() -> usize {
    8
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelSection {
    /// A Hugging Face folder (Qwen2 or Qwen2.5-VL; relative to the config file's folder),
    /// `default` (the embedded small model, built from `schedule.seed`, or `default@SEED`)
    /// or `default-vl` (its VL sibling).
    pub path: ModelSource,
    /// f32, bf16 or f16 parameters.
    pub dtype: DType,
    /// auto, cpu, cuda, cuda:N.
    pub device: DeviceChoice,
    /// Keep a VL model's vision tower fixed (false: trained with the rest, as VAGEN does).
    /// With LoRA it applies to the tower's adapters, if `target_modules` gives it any.
    pub freeze_vision: bool,
    /// `[model.lora]`: train LoRA adapters (PEFT's settings and names, see
    /// `vagen_model::LoraConfig`) over the frozen model instead of every weight. The actor's
    /// checkpoints then hold the adapter in PEFT's layout; a critic is its own adapter and
    /// head over the same base; `engine.merge_lora` generates from a merged copy.
    pub lora: Option<vagen_model::LoraConfig>,
}

impl Default for ModelSection {
    fn default() -> Self {
        ModelSection {
            path: embedded_model(),
            dtype: DType::F32,
            device: DeviceChoice::Auto,
            freeze_vision: false,
            lora: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AlgorithmSection {
    pub advantage: AdvantageConfig,
    pub filter: FilterConfig,
    pub policy_loss: PolicyLossConfig,
    pub value_loss: ValueLossConfig,
    /// Off-policy correction against the policy that sampled each token (generation's
    /// log-probs): `none`, `tis` or `decoupled` (see `OffPolicy`). Without
    /// `rollout.reuse_logprobs`, π_old is the update's own forward and generation's numerics
    /// (another engine, batch shapes, bf16) are what it corrects.
    pub off_policy: crate::OffPolicy,
    /// TIS's truncation of w = π_old / π_behaviour, and decoupled PPO's cap (tokens over it
    /// count zero) (2.0).
    pub off_policy_cap: f64,
}

impl Default for AlgorithmSection {
    fn default() -> Self {
        AlgorithmSection {
            advantage: AdvantageConfig { estimator: Estimator::Grpo, ..AdvantageConfig::default() },
            filter: FilterConfig { keep_fraction: 1.0, ..FilterConfig::default() },
            policy_loss: PolicyLossConfig::default(),
            value_loss: ValueLossConfig::default(),
            off_policy: crate::OffPolicy::None,
            off_policy_cap: 2.0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OptimSection {
    /// AdamW learning rate of the policy (RAGEN 1e-6 for 0.5B; a small model wants more).
    pub actor_lr: f64,
    /// AdamW learning rate of the critic (RAGEN 1e-5).
    pub critic_lr: f64,
    pub weight_decay: f64,
    /// Steps of linear learning-rate warm-up.
    pub warmup_steps: usize,
    /// The learning rate over the RL steps after warm-up: `constant`, or `linear` down to
    /// 0 at `schedule.steps` (CleanRL's `anneal_lr`).
    pub lr_schedule: LrSchedule,
    /// Sequences per optimizer step.
    pub mini_batch: usize,
    /// Sequences per forward/backward (gradients accumulate over a mini-batch).
    pub micro_batch: usize,
    /// Padded tokens (sequences × the longest) per forward/backward as well, when above 0:
    /// a micro-batch closes at whichever limit comes first, so a few long sequences do not
    /// take the memory of `micro_batch` of them. A sequence over the budget goes alone.
    pub micro_batch_tokens: usize,
    /// Passes over each step's batch.
    pub epochs: usize,
    /// Global gradient-norm clip (1.0); a non-finite norm skips the step.
    pub grad_clip: f64,
    /// With several data-parallel ranks, each keeps AdamW's moments for 1/N of the
    /// parameters (ZeRO-1): the same update, a fraction of the optimiser's memory.
    pub shard: bool,
}

impl Default for OptimSection {
    fn default() -> Self {
        OptimSection {
            actor_lr: 1e-6,
            critic_lr: 1e-5,
            weight_decay: 0.0,
            warmup_steps: 0,
            lr_schedule: LrSchedule::Constant,
            mini_batch: 32,
            micro_batch: 8,
            micro_batch_tokens: 0,
            epochs: 1,
            grad_clip: 1.0,
            shard: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LrSchedule {
    Constant,
    Linear,
}

impl OptimSection {
    /// The factor on both learning rates at 0-based RL `step` of `steps`: warm-up ramps
    /// it to 1, `linear` then takes it down so that the step after the last would be at 0.
    pub fn lr_scale(&self, step: usize, steps: usize) -> f64 {
        let warm = if self.warmup_steps > 0 { ((step + 1) as f64 / self.warmup_steps as f64).min(1.0) } else { 1.0 };
        match self.lr_schedule {
            LrSchedule::Constant => warm,
            LrSchedule::Linear => warm * (1.0 - step as f64 / steps.max(1) as f64).max(0.0),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScheduleSection {
    /// RL steps (RAGEN 200).
    pub steps: usize,
    /// Evaluate every k steps (0: only before and after).
    pub eval_every: usize,
    /// Checkpoint every k steps (0: only at the end).
    pub save_every: usize,
    /// Checkpoints kept in the run folder, the newest; older ones are deleted after each
    /// save. 0 keeps them all. Keep at least 2: a resume falls back to the previous one when
    /// the newest will not load.
    pub keep_last: usize,
    /// Seeds everything: weights of the default model, sampling, shuffling.
    pub seed: u64,
}

impl Default for ScheduleSection {
    fn default() -> Self {
        ScheduleSection { steps: 200, eval_every: 10, save_every: 50, keep_last: 0, seed: 0 }
    }
}

/// Supervised warm start on the env's oracle trajectories, through the same rollout path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SftSection {
    /// Optimizer steps; 0 skips SFT.
    pub steps: usize,
    pub lr: f64,
    /// Oracle episodes per step.
    pub episodes_per_step: usize,
    /// Probability that an oracle answer is replaced by a random one (more varied data, and
    /// a warm start that leaves RL something to improve).
    pub action_noise: f64,
    /// 0: fresh episodes every step. n: the episodes of the first n steps, cycled (a fixed
    /// dataset, e.g. to check that the model can fit it).
    pub dataset_steps: usize,
    /// Checkpoint every k SFT steps (`checkpoints/sft-NNNNNN/`) and when SFT ends, so a
    /// run killed during a long warm start resumes there; 0: only when SFT ends.
    pub save_every: usize,
}

impl Default for SftSection {
    fn default() -> Self {
        SftSection { steps: 0, lr: 1e-4, episodes_per_step: 16, action_noise: 0.0, dataset_steps: 0, save_every: 20 }
    }
}

/// The critic of the critic-based estimators (gae, bi-level-gae, turn-gae).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CriticSection {
    /// Where its transformer starts. `actor` (default): a copy of the actor's as RL begins
    /// (after SFT, if any) with a fresh value head, as verl builds its critic from the
    /// policy's weights: it starts from features that already read the prompts. `seed`: a
    /// trunk of the actor's shape drawn at random (N(0, initializer_range), as the embedded
    /// model) from `schedule.seed + 1`, sharing nothing with the actor. The head starts at
    /// zero either way (every value 0). A resumed run reloads its trained critic instead.
    pub init: CriticInit,
}

/// `critic.init`: see [`CriticSection::init`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CriticInit {
    #[default]
    Actor,
    Seed,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("--set {0}: expected key.path=value")]
    BadOverride(String),
    #[error("{field}: {message}")]
    Invalid { field: &'static str, message: String },
    /// A key of a table that several parts read (`[rollout]`) that none of them takes.
    #[error(
        "{0}: unknown key (the rollout's, the sampling's and the sequences' keys are documented in vagen_rollout::RolloutConfig, vagen_model::Sampling and host/trainer/src/rollout_section.rs)"
    )]
    UnknownKey(String),
    /// A `[sandbox]` key that is unknown or holds an unusable value. (Not a `#[from]`,
    /// which would make the limit error a source and print its message twice.)
    #[error("sandbox.{0}")]
    Sandbox(LimitError),
}

impl From<LimitError> for ConfigError {
    fn from(e: LimitError) -> Self {
        ConfigError::Sandbox(e)
    }
}

impl TrainConfig {
    /// Reads `text` (from `path`, for messages) with `overrides` (`a.b=c`, the value in TOML
    /// syntax, or a bare string) applied first.
    pub fn parse(text: &str, path: &str, overrides: &[String]) -> Result<Self, ConfigError> {
        Self::parse_in(text, path, None, overrides)
    }

    /// The config file at `path` with `--set` overrides: relative paths in the file
    /// (`env.plugin`, a folder `model.path`, `[[reward]] plugin`, a local judge's folder
    /// `model`) are resolved against the file's folder, those given by a `--set` against
    /// the working folder, like any path on a command line.
    pub fn from_file(path: &std::path::Path, overrides: &[String]) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::Parse { path: path.display().to_string(), message: e.to_string() })?;
        let folder = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
        // Absolute, so the run folder's copy of the config names the same files from anywhere.
        let folder = std::path::absolute(folder)
            .map_err(|e| ConfigError::Parse { path: path.display().to_string(), message: e.to_string() })?;
        Self::parse_in(&text, &path.display().to_string(), Some(&folder), overrides)
    }

    fn parse_in(
        text: &str,
        path: &str,
        folder: Option<&std::path::Path>,
        overrides: &[String],
    ) -> Result<Self, ConfigError> {
        let err = |message: String| ConfigError::Parse { path: path.into(), message };
        let mut doc: toml::Table = toml::from_str(text).map_err(|e| err(e.to_string()))?;
        if let Some(folder) = folder {
            resolve_paths(&mut doc, folder);
        }
        let before = doc.clone();
        for o in overrides {
            let (key, value) = o.split_once('=').ok_or_else(|| ConfigError::BadOverride(o.clone()))?;
            let value: toml::Value = toml::from_str::<toml::Table>(&format!("v = {value}"))
                .ok()
                .and_then(|mut t| t.remove("v"))
                .unwrap_or_else(|| toml::Value::String(value.to_string()));
            set(&mut doc, key.trim(), value).map_err(|_| ConfigError::BadOverride(o.clone()))?;
        }
        // Read by the code that reads `--limit` flags, for the same checks and messages that
        // name the key (serde's would name neither the key of a bad value nor the table).
        if let Some(sandbox) = doc.get("sandbox") {
            let table = sandbox.as_table().ok_or_else(|| err("sandbox must be a table of limits".into()))?;
            let values = table.iter().map(|(k, v)| (k.as_str(), serde_json::to_value(v).expect("TOML is JSON")));
            Limits::with_values(values)?;
        }
        let max_new_tokens_given =
            doc.get("rollout").and_then(|r| r.as_table()).is_some_and(|r| r.contains_key("max_new_tokens"));
        let mut config: TrainConfig = match toml::Value::Table(doc).try_into() {
            Ok(c) => c,
            // The file reads without the overrides: a `--set` is at fault, so it is named.
            Err(e) if !overrides.is_empty() && toml::Value::Table(before).try_into::<TrainConfig>().is_ok() => {
                let sets: Vec<String> = overrides.iter().map(|o| format!("--set {o}")).collect();
                return Err(ConfigError::Parse { path: sets.join(" "), message: e.to_string() });
            }
            Err(e) => return Err(err(e.to_string())),
        };
        config.validate()?;
        config.max_new_tokens_given = max_new_tokens_given;
        Ok(config)
    }

    /// Checks what serde cannot: consistency between options, before any work starts.
    /// Every real-valued setting finite and in its range, so a NaN or an out-of-range value
    /// is refused when the config is read, not after SFT or at the first evaluation.
    fn check_numbers(&self) -> Result<(), ConfigError> {
        use Range::*;
        let (pl, r, a) = (&self.algorithm.policy_loss, &self.rollout, &self.algorithm.advantage);
        let mut checks = vec![
            ("sft.lr", self.sft.lr, LearningRate),
            ("optim.weight_decay", self.optim.weight_decay, Unit),
            ("optim.grad_clip", self.optim.grad_clip, PositiveScale),
            ("rollout.temperature", r.sampling.temperature, NonNegative),
            ("rollout.val_temperature", r.sampling.val_temperature, NonNegative),
            ("rollout.top_p", r.sampling.top_p, Share),
            ("rollout.format_reward.bonus", r.episodes.format_reward.bonus, Scale),
            ("rollout.format_reward.penalty", r.episodes.format_reward.penalty, Scale),
            ("algorithm.policy_loss.clip_low", pl.clip_low, NonNegative),
            ("algorithm.policy_loss.clip_high", pl.clip_high, NonNegative),
            ("algorithm.policy_loss.entropy_coef", pl.entropy_coef, Scale),
            ("algorithm.value_loss.clip", self.algorithm.value_loss.clip, NonNegative),
            ("algorithm.advantage.gamma", a.gamma, Unit),
            ("algorithm.advantage.lambda", a.lambda, Unit),
            ("algorithm.advantage.gamma_turn", a.gamma_turn, Unit),
            ("algorithm.advantage.epsilon", a.epsilon, Positive),
        ];
        checks.extend(pl.dual_clip.map(|c| ("algorithm.policy_loss.dual_clip", c, AboveOne)));
        checks.extend(pl.kl.as_ref().map(|k| ("algorithm.policy_loss.kl.coef", k.coef, NonNegative)));
        checks.extend(self.rewards.iter().map(|r| ("reward.weight", r.weight, Scale)));
        checks.extend(a.lambda_turn.map(|l| ("algorithm.advantage.lambda_turn", l, Unit)));
        checks.extend(a.lambda_token.map(|l| ("algorithm.advantage.lambda_token", l, Unit)));
        for (field, value, range) in checks {
            if let Some(message) = range.refuses(value) {
                return Err(ConfigError::Invalid { field, message });
            }
        }
        Ok(())
    }

    /// `[rollout]`'s own rules.
    fn check_rollout(&self) -> Result<(), ConfigError> {
        let bad = |field, message: String| Err(ConfigError::Invalid { field, message });
        if let Some(key) = self.rollout.unknown_keys().into_iter().next() {
            return Err(ConfigError::UnknownKey(key));
        }
        let r = &self.rollout.episodes;
        if r.format == vagen_rollout::Format::Raw {
            let why = "`raw` is `vagen-host run`'s (answers sent as written, no format reward); a model trains in a format with an <answer>";
            return bad("rollout.format", why.into());
        }
        if !r.observation_text && !r.describe_state {
            return bad(
                "rollout.observation_text",
                "false leaves the prompt without an observation: set rollout.describe_state = true".into(),
            );
        }
        if !(0.0..=1.0).contains(&r.explore) {
            return bad("rollout.explore", format!("{} is not a probability", r.explore));
        }
        if self.rollout.sampling.max_new_tokens == 0 {
            return bad("rollout.max_new_tokens", "must be at least 1".into());
        }
        if let Some(JudgeSection::Openai { api_key_env: Some(name), .. }) = &self.judge {
            return bad(
                "judge.api_key_env",
                format!(
                    "{name:?}: the API key's variable is named with `--judge-key-env` (or in \
                     ~/.config/vagen/judge.toml), never in a run's config, which could send any secret to any host"
                ),
            );
        }
        if let Some(JudgeSection::Openai { concurrency, timeout_s, .. }) = &self.judge {
            if *concurrency == 0 {
                return bad("judge.concurrency", "must be at least 1".into());
            }
            if !(timeout_s.is_finite() && *timeout_s > 0.0) {
                return bad("judge.timeout_s", format!("{timeout_s} must be a positive number of seconds"));
            }
        }
        for r in &self.rewards {
            if !r.plugin.is_file() {
                return bad("reward.plugin", format!("{} does not exist", r.plugin.display()));
            }
            if !r.weight.is_finite() {
                return bad("reward.weight", format!("{} is not a finite number", r.weight));
            }
        }
        Ok(())
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |field, message: String| Err(ConfigError::Invalid { field, message });
        let remote = vagen_runtime::is_openenv_url(&self.env.plugin);
        if !remote && !self.env.plugin.is_file() {
            return bad("env.plugin", format!("{} does not exist", self.env.plugin.display()));
        }
        if !remote && self.env.openenv.is_some() {
            return bad(
                "env.openenv",
                "it applies to an OpenEnv server (plugin = \"openenv+http://HOST:PORT\") only".into(),
            );
        }
        if self.asynchronous.max_staleness > 0 && self.engine.merge_lora {
            return bad(
                "engine.merge_lora",
                "with [async] the generator thread keeps its own copy of the adapters; merged generation is not built for it yet: turn one off".into(),
            );
        }
        if self.engine.device.is_some() && self.asynchronous.max_staleness == 0 {
            return bad(
                "engine.device",
                "places the generator thread's copy of the model: set async.max_staleness to 1 or more (the synchronous trainer generates with the actor on model.device)".into(),
            );
        }
        if self.asynchronous.refresh == crate::generator::Refresh::DecodeStep {
            if self.asynchronous.max_staleness == 0 {
                return bad(
                    "async.refresh",
                    "decode-step needs a generator: set async.max_staleness to 1 or more".into(),
                );
            }
            if self.engine.kind != vagen_model::EngineKind::Continuous {
                return bad(
                    "async.refresh",
                    "decode-step needs the continuous engine (engine.kind = \"continuous\"): the static one cannot recompute running rows".into(),
                );
            }
        }
        let cap = self.algorithm.off_policy_cap;
        if !(cap.is_finite() && cap >= 1.0) {
            return bad("algorithm.off_policy_cap", format!("{cap} is not a weight cap of at least 1"));
        }
        if let Err(e) = self.distributed.validate() {
            return bad("distributed.timeout_s", e);
        }
        let est = self.algorithm.advantage.estimator;
        match &self.model.lora {
            Some(lora) => {
                if let Err(e) = lora.check() {
                    return bad("model.lora", e.to_string());
                }
                if est.uses_critic() && self.critic.init == CriticInit::Seed {
                    return bad(
                        "critic.init",
                        "\"seed\" draws a decoder of its own; with model.lora the critic is an adapter over the \
                         actor's frozen base: use critic.init = \"actor\""
                            .into(),
                    );
                }
            }
            None if self.engine.merge_lora => {
                return bad("engine.merge_lora", "merges LoRA adapters: set [model.lora], or turn it off".into());
            }
            None => {}
        }
        if matches!(est, Estimator::Grpo | Estimator::Gigpo) && self.env.group_size < 2 {
            let name = if est == Estimator::Grpo { "grpo" } else { "gigpo" };
            return bad("env.group_size", format!("{name} normalises within groups and needs group_size >= 2"));
        }
        let pl = &self.algorithm.policy_loss;
        if self.algorithm.filter.drop_zero_advantage && (pl.entropy_coef != 0.0 || pl.kl.is_some() || est.uses_critic())
        {
            return bad(
                "algorithm.filter.drop_zero_advantage",
                "a sequence with zero advantages still feeds the entropy bonus, the KL penalty or the critic: \
                 set entropy_coef = 0, no kl and a critic-free estimator, or turn it off"
                    .into(),
            );
        }
        if self.rollout.sequences.per_turn && est.uses_critic() {
            return bad(
                "rollout.per_turn",
                format!("needs a critic-free estimator (grpo, gigpo, brpo, reinforce), not {est:?}"),
            );
        }
        if self.env.groups == 0 || self.env.group_size == 0 {
            return bad("env.groups", "groups and group_size must be at least 1".into());
        }
        let seeds_needed = self.schedule.steps as u64 * self.env.groups as u64 + self.sft.steps as u64 * 1024;
        if self.env.train_seed_start.saturating_add(seeds_needed) > self.env.val_seed_start
            && self.env.val_seed_start > self.env.train_seed_start
        {
            return bad("env.val_seed_start", "training seeds would reach the held-out seeds".into());
        }
        let o = &self.optim;
        if o.micro_batch == 0 || o.mini_batch == 0 || !o.mini_batch.is_multiple_of(o.micro_batch) {
            return bad("optim.micro_batch", format!("must divide optim.mini_batch ({})", o.mini_batch));
        }
        if o.epochs == 0 {
            return bad("optim.epochs", "must be at least 1".into());
        }
        if let Some(message) = Range::LearningRate.refuses(o.actor_lr) {
            return bad("optim.actor_lr", message);
        }
        if est.uses_critic()
            && let Some(message) = Range::LearningRate.refuses(o.critic_lr)
        {
            return bad("optim.critic_lr", message);
        }
        if !(0.0..=1.0).contains(&self.env.max_failure_rate) {
            return bad("env.max_failure_rate", format!("{} is not a share in [0, 1]", self.env.max_failure_rate));
        }
        if !(0.0..=1.0).contains(&self.sft.action_noise) {
            return bad("sft.action_noise", format!("{} is not a probability", self.sft.action_noise));
        }
        let f = self.algorithm.filter.keep_fraction;
        if !(f > 0.0 && f <= 1.0) {
            return bad("algorithm.filter.keep_fraction", format!("{f} is not in (0, 1]"));
        }
        self.check_rollout()?;
        self.check_numbers()?;
        self.sandbox.validate()?;
        Ok(())
    }

    /// The env config of evaluation episodes, as the JSON string plugins take.
    pub fn env_config_json(&self) -> String {
        table_json(&self.env.config)
    }

    /// The env config of training episodes: `env.config` with `env.train_config` over it.
    pub fn train_env_config_json(&self) -> String {
        table_json(&overridden(&self.env.config, &self.env.train_config))
    }

    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("the config serialises")
    }
}

fn set(doc: &mut toml::Table, key: &str, value: toml::Value) -> Result<(), ()> {
    let mut parts = key.split('.').peekable();
    let mut table = doc;
    while let Some(part) = parts.next() {
        if parts.peek().is_none() {
            table.insert(part.to_string(), value);
            return Ok(());
        }
        let entry = table.entry(part.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        table = entry.as_table_mut().ok_or(())?;
    }
    Err(())
}

/// The file's relative paths joined to its folder (see [`TrainConfig::from_file`]); a
/// model spec that is not a folder (`default`, `default-vl@3`) is left as it is.
fn resolve_paths(doc: &mut toml::Table, folder: &std::path::Path) {
    fn join(value: Option<&mut toml::Value>, folder: &std::path::Path, is_path: fn(&str) -> bool) {
        if let Some(toml::Value::String(s)) = value
            && is_path(s)
            && std::path::Path::new(s.as_str()).is_relative()
        {
            *s = folder.join(&*s).display().to_string();
        }
    }
    let any = |_: &str| true;
    let folder_model = |s: &str| matches!(s.parse::<ModelSource>(), Ok(ModelSource::Folder(_)));
    fn field<'a>(doc: &'a mut toml::Table, table: &str, key: &str) -> Option<&'a mut toml::Value> {
        doc.get_mut(table).and_then(toml::Value::as_table_mut).and_then(|t| t.get_mut(key))
    }
    join(field(doc, "env", "plugin"), folder, |s| !s.starts_with(vagen_runtime::openenv::PREFIX));
    join(field(doc, "model", "path"), folder, folder_model);
    join(field(doc, "judge", "model"), folder, folder_model);
    if let Some(toml::Value::Array(rewards)) = doc.get_mut("reward") {
        for r in rewards.iter_mut().filter_map(toml::Value::as_table_mut) {
            join(r.get_mut("plugin"), folder, any);
        }
    }
}

/// `base` with each key of `over` replacing (or adding) its own.
fn overridden(base: &toml::Table, over: &toml::Table) -> toml::Table {
    let mut table = base.clone();
    table.extend(over.clone());
    table
}

fn table_json(table: &toml::Table) -> String {
    if table.is_empty() { String::new() } else { serde_json::to_string(table).expect("TOML is JSON") }
}

#[cfg(test)]
mod tests {
    use super::{LrSchedule, OptimSection, TrainConfig, overridden, table_json};

    #[test]
    fn relative_paths_in_a_config_file_are_its_folders_and_a_set_ones_the_working_folders() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("configs/run.toml");
        let elsewhere = dir.path().join("elsewhere.wasm");
        for f in ["configs/models/qwen/config.json", "plugins/env.wasm", "configs/r.wasm", "elsewhere.wasm"] {
            std::fs::create_dir_all(dir.path().join(f).parent().unwrap()).unwrap();
            std::fs::write(dir.path().join(f), "").unwrap();
        }
        let text = format!(
            "[env]\nplugin = \"../plugins/env.wasm\"\n[model]\npath = \"models/qwen\"\n\
             [[reward]]\nplugin = \"r.wasm\"\n[[reward]]\nplugin = {:?}\n",
            elsewhere.display().to_string()
        );
        std::fs::write(&file, text).unwrap();
        let cfg = TrainConfig::from_file(&file, &[]).unwrap();
        let folder = std::path::absolute(dir.path().join("configs")).unwrap();
        assert_eq!(cfg.env.plugin, folder.join("../plugins/env.wasm"));
        assert_eq!(cfg.model.path.to_string(), folder.join("models/qwen").display().to_string());
        assert_eq!(cfg.rewards[0].plugin, folder.join("r.wasm"));
        assert_eq!(cfg.rewards[1].plugin, elsewhere);
        // A --set is a command-line path: the working folder's (the crate's, for tests). An
        // embedded model is no path.
        let sets = ["env.plugin=\"src/lib.rs\"".to_string(), "model.path=\"default@3\"".to_string()];
        let cfg = TrainConfig::from_file(&file, &sets).unwrap();
        assert_eq!(cfg.env.plugin, std::path::Path::new("src/lib.rs"));
        assert_eq!(cfg.model.path.to_string(), "default@3");
        // The run folder's copy names the same files from anywhere.
        assert!(cfg.to_toml().contains(&folder.join("r.wasm").display().to_string()));
    }

    #[test]
    fn an_openenv_server_is_no_path_and_its_table_needs_one() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("run.toml");
        let text = "[env]\nplugin = \"openenv+http://127.0.0.1:8765\"\n[env.openenv]\naction_field = \"move\"\ntimeout_s = 5\n";
        std::fs::write(&file, text).unwrap();
        let cfg = TrainConfig::from_file(&file, &[]).unwrap();
        assert_eq!(cfg.env.plugin, std::path::Path::new("openenv+http://127.0.0.1:8765"));
        let openenv = cfg.env.openenv.clone().unwrap();
        assert_eq!((openenv.action_field.as_deref(), openenv.timeout_s), (Some("move"), Some(5.0)));
        // The run folder's copy keeps the table.
        assert!(cfg.to_toml().contains("action_field = \"move\""));
        let typo = text.replace("action_field", "action_feild");
        std::fs::write(&file, typo).unwrap();
        assert!(TrainConfig::from_file(&file, &[]).unwrap_err().to_string().contains("action_feild"));
        std::fs::write(dir.path().join("env.wasm"), "").unwrap();
        let local = text.replace("openenv+http://127.0.0.1:8765", "env.wasm");
        std::fs::write(&file, local).unwrap();
        let err = TrainConfig::from_file(&file, &[]).unwrap_err().to_string();
        assert!(err.contains("env.openenv") && err.contains("OpenEnv server"), "{err}");
    }

    fn scales(warmup_steps: usize, lr_schedule: LrSchedule, steps: usize) -> Vec<f64> {
        let o = OptimSection { warmup_steps, lr_schedule, ..OptimSection::default() };
        (0..steps).map(|s| o.lr_scale(s, steps)).collect()
    }

    #[test]
    fn train_config_keys_replace_those_of_config_for_training_only() {
        let config = toml::toml! { size = 4
        frozen_prob = 0.8 };
        let train: serde_json::Value =
            serde_json::from_str(&table_json(&overridden(&config, &toml::toml! { frozen_prob = 0.6 }))).unwrap();
        assert_eq!(train, serde_json::json!({ "size": 4, "frozen_prob": 0.6 }));
        assert_eq!(overridden(&config, &toml::Table::new()), config);
        assert_eq!(table_json(&toml::Table::new()), "");
    }

    #[test]
    fn the_learning_rate_warms_up_then_stays_or_falls_linearly_to_zero() {
        assert_eq!(scales(0, LrSchedule::Constant, 3), [1.0, 1.0, 1.0]);
        assert_eq!(scales(4, LrSchedule::Constant, 6), [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]);
        assert_eq!(scales(0, LrSchedule::Linear, 4), [1.0, 0.75, 0.5, 0.25]);
        // Warm-up and decay multiply: the ramp is cut by the decay already under way.
        assert_eq!(scales(2, LrSchedule::Linear, 4), [0.5, 0.75, 0.5, 0.25]);
    }
}

/// The largest coefficient magnitude accepted (`Range::Scale`).
const MAX_SCALE: f64 = 1e6;

/// Where a real-valued setting may lie (all of them finite).
#[derive(Clone, Copy)]
enum Range {
    NonNegative,
    Positive,
    /// [0, 1].
    Unit,
    /// (0, 1].
    Share,
    /// > 1 (dual-clip's bound on a negative advantage's ratio).
    AboveOne,
    /// (0, 1]: no optimiser here takes a larger step size sanely.
    LearningRate,
    /// |v| <= 1e6, as rewards are bounded (`max_abs_reward`): a coefficient past it turns
    /// every loss or reward it touches into an overflow.
    Scale,
    /// (0, 1e6].
    PositiveScale,
}

impl Range {
    /// Why `v` is refused, if it is.
    fn refuses(self, v: f64) -> Option<String> {
        let ok = v.is_finite()
            && match self {
                Range::NonNegative => v >= 0.0,
                Range::Positive => v > 0.0,
                Range::Unit => (0.0..=1.0).contains(&v),
                Range::Share => v > 0.0 && v <= 1.0,
                Range::AboveOne => v > 1.0,
                Range::LearningRate => v > 0.0 && v <= 1.0,
                Range::Scale => v.abs() <= MAX_SCALE,
                Range::PositiveScale => v > 0.0 && v <= MAX_SCALE,
            };
        let want = match self {
            Range::NonNegative => "a finite number >= 0",
            Range::Positive => "a finite number > 0",
            Range::Unit => "in [0, 1]",
            Range::Share => "in (0, 1]",
            Range::AboveOne => "a finite number > 1",
            Range::LearningRate => "a learning rate in (0, 1]",
            Range::Scale => "a number within ±1e6",
            Range::PositiveScale => "in (0, 1e6]",
        };
        // 1e300 as itself, not as 301 digits.
        let shown = if v.is_finite() && v != 0.0 && !(1e-4..1e6).contains(&v.abs()) {
            format!("{v:e}")
        } else {
            format!("{v}")
        };
        (!ok).then(|| format!("{shown} is not {want}"))
    }
}
