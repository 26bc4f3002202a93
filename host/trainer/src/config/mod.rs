//! The training run's configuration: one TOML file, every field documented here and in
//! the sections' files, unknown fields rejected, `--set a.b=c` overrides applied to the
//! TOML before it is read. Each section checks its own values (`validate`); the checks
//! across sections are [`TrainConfig::validate`]'s.

mod algorithm;
mod env;
mod model;
mod optim;
mod reward;

pub use algorithm::{AlgorithmSection, OffPolicyChoice};
pub use env::EnvSection;
pub use model::{CriticInit, CriticSection, ModelSection};
pub use optim::{OptimSection, ScheduleSection, SftSection};
pub use reward::{JudgeSection, RewardSection};

use crate::async_section::{AsyncSection, Refresh};
pub use crate::config_error::ConfigError;
use crate::config_error::{Range, invalid};
use crate::judge_access::JudgeAccess;
use crate::rollout_section::RolloutSection;
use serde::{Deserialize, Serialize};
use vagen_algo::Estimator;
use vagen_model::ModelSource;
use vagen_runtime::Limits;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    pub env: EnvSection,
    #[serde(default)]
    pub model: ModelSection,
    #[serde(default)]
    pub rollout: RolloutSection,
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
    pub asynchronous: AsyncSection,
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
    pub judge_access: JudgeAccess,
    /// Whether the config (or a `--set`) gave `rollout.max_new_tokens`: without it, a run
    /// of the embedded model takes it from the env's oracle (`vocabulary.rs`).
    #[serde(skip)]
    pub max_new_tokens_given: bool,
}

impl TrainConfig {
    /// Whether generation's log-probs are the old ones (`rollout.reuse_logprobs`): `auto`
    /// reuses them only where generation computes what the training forward would, up to
    /// f32 rounding: an f32 actor, generating from the weights being trained (no `[async]`
    /// staleness, no merged LoRA copy), with no off-policy correction, which needs π_old
    /// apart from the sampler's.
    pub fn reuses_logprobs(&self) -> bool {
        let matches = self.model.dtype == vagen_model::DType::F32
            && self.asynchronous.max_staleness == 0
            && !self.engine.merge_lora
            && self.off_policy() == crate::policy_loss::OffPolicy::None;
        self.rollout.sequences.reuse_logprobs.reuses(matches)
    }

    /// The off-policy correction this run trains with (`algorithm.off_policy` for its dtype).
    pub fn off_policy(&self) -> crate::policy_loss::OffPolicy {
        self.algorithm.off_policy.resolve(self.model.dtype)
    }

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
        let mut config = Self::parse_in(&text, &path.display().to_string(), Some(&folder), overrides)?;
        config.pin_with_lock(path)?;
        Ok(config)
    }

    /// With a `vagen.lock` beside the config file, each `oci://` tag it names is pinned to the
    /// locked digest (one the lock lacks is an error: lock again).
    fn pin_with_lock(&mut self, path: &std::path::Path) -> Result<(), ConfigError> {
        let lock_path = vagen_registry::lock::path_for(path);
        let err = |e: vagen_registry::Error| ConfigError::Parse {
            path: lock_path.display().to_string(),
            message: e.to_string(),
        };
        let Some(lock) = vagen_registry::Lock::beside(path).map_err(err)? else {
            return Ok(());
        };
        self.map_components(|p| lock.pin(&p.display().to_string(), &lock_path).map(std::path::PathBuf::from))
            .map_err(err)
    }

    /// Each `oci://` tag pinned to the digest its registry gives it now, so the run's
    /// config.toml (and a `--resume` or `eval --config` of it) names the bytes this run used,
    /// whatever the tag later names.
    pub fn pin_components(&mut self) -> Result<(), vagen_registry::Error> {
        self.map_components(|p| {
            if !vagen_registry::is_oci(p) {
                return Ok(p.clone());
            }
            let r = vagen_registry::OciRef::parse(&p.display().to_string())?;
            Ok(vagen_registry::resolve(&r, &vagen_registry::Credentials::default())?.to_string().into())
        })
    }

    /// Replaces each component name (`env.plugin`, every `[[reward]] plugin`) with `f`'s.
    fn map_components<E>(&mut self, f: impl Fn(&std::path::PathBuf) -> Result<std::path::PathBuf, E>) -> Result<(), E> {
        if !self.env.plugin.as_os_str().is_empty() {
            self.env.plugin = f(&self.env.plugin)?;
        }
        for r in &mut self.rewards {
            r.plugin = f(&r.plugin)?;
        }
        Ok(())
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

    /// Checks what serde cannot, before any work starts, naming the field: first how the
    /// sections fit together, then each section by its own rules (every real-valued
    /// setting finite and in its range, so a NaN or an out-of-range value is refused when
    /// the config is read, not after SFT or at the first evaluation).
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check_generation()?;
        self.check_estimator()?;
        self.check_seeds()?;
        self.env.validate()?;
        self.check_harness()?;
        self.asynchronous.validate()?;
        self.algorithm.validate()?;
        if let Err(e) = self.distributed.validate() {
            return invalid("distributed.timeout_s", e);
        }
        self.model.validate()?;
        self.optim.validate()?;
        self.sft.validate()?;
        self.rollout.validate()?;
        if let Some(judge) = &self.judge {
            judge.validate()?;
        }
        self.rewards.iter().try_for_each(RewardSection::validate)?;
        self.sandbox.validate()?;
        Ok(())
    }

    /// A harness run against what needs an env plugin: SFT from the oracle (a harness has
    /// none: SFT reads `sft.data`), the embedded model's vocabulary (learnt from `sft.data`),
    /// answers the trainer writes itself (exploration) and the generator thread.
    fn check_harness(&self) -> Result<(), ConfigError> {
        if self.env.harness.is_none() {
            return Ok(());
        }
        if self.sft.data.is_none() && (self.sft.steps > 0 || self.model.path.is_embedded()) {
            return invalid(
                "sft.data",
                "a harness has no oracle to imitate: SFT (and the embedded model's vocabulary) learn from a file of the harness's conversations, sft.data".into(),
            );
        }
        if self.asynchronous.max_staleness > 0 {
            return invalid("async.max_staleness", "harness episodes are played synchronously (0) for now".into());
        }
        if self.rollout.episodes.explore > 0.0 || self.rollout.sequences.per_turn {
            return invalid(
                "rollout",
                "a harness's calls are recorded as the model answered them: rollout.explore and rollout.per_turn do not apply".into(),
            );
        }
        Ok(())
    }

    /// `[engine]` against `[async]` and `[model.lora]`: what generates rollouts, and where.
    fn check_generation(&self) -> Result<(), ConfigError> {
        if self.asynchronous.max_staleness > 0 && self.engine.merge_lora {
            return invalid(
                "engine.merge_lora",
                "with [async] the generator thread keeps its own copy of the adapters; merged generation is not built for it yet: turn one off".into(),
            );
        }
        if self.engine.device.is_some() && self.asynchronous.max_staleness == 0 {
            return invalid(
                "engine.device",
                "places the generator thread's copy of the model: set async.max_staleness to 1 or more (the synchronous trainer generates with the actor on model.device)".into(),
            );
        }
        if self.asynchronous.refresh == Refresh::DecodeStep && self.engine.kind != vagen_model::EngineKind::Continuous {
            return invalid(
                "async.refresh",
                "decode-step needs the continuous engine (engine.kind = \"continuous\"): the static one cannot recompute running rows".into(),
            );
        }
        if self.sft.full && (self.model.lora.is_none() || self.sft.steps == 0) {
            return invalid(
                "sft.full",
                "trains every weight before RL trains [model.lora]'s adapters: it needs [model.lora] and sft.steps > 0"
                    .into(),
            );
        }
        if self.model.lora.is_none() && self.engine.merge_lora {
            return invalid("engine.merge_lora", "merges LoRA adapters: set [model.lora], or turn it off".into());
        }
        Ok(())
    }

    /// `algorithm.advantage.estimator` against what it needs of the critic, the groups and
    /// the sequences.
    fn check_estimator(&self) -> Result<(), ConfigError> {
        let est = self.algorithm.advantage.estimator;
        if self.model.lora.is_some() && est.uses_critic() && self.critic.init == CriticInit::Seed {
            return invalid(
                "critic.init",
                "\"seed\" draws a decoder of its own; with model.lora the critic is an adapter over the \
                 actor's frozen base: use critic.init = \"actor\""
                    .into(),
            );
        }
        if matches!(est, Estimator::Grpo | Estimator::Gigpo) && self.env.group_size < 2 {
            let name = if est == Estimator::Grpo { "grpo" } else { "gigpo" };
            return invalid("env.group_size", format!("{name} normalises within groups and needs group_size >= 2"));
        }
        if self.rollout.sequences.per_turn && est.uses_critic() {
            return invalid(
                "rollout.per_turn",
                format!("needs a critic-free estimator (grpo, gigpo, brpo, reinforce), not {est:?}"),
            );
        }
        if est.uses_critic()
            && let Some(message) = Range::LearningRate.refuses(self.optim.critic_lr)
        {
            return invalid("optim.critic_lr", message);
        }
        Ok(())
    }

    /// The training seeds every step (and SFT step) takes stay below the held-out ones; more
    /// than one held-out answer a seed is sampled.
    fn check_seeds(&self) -> Result<(), ConfigError> {
        match self.env.val_samples {
            0 => return invalid("env.val_samples", "at least one answer a held-out seed".into()),
            n if n > 1 && self.rollout.sampling.val_temperature <= 0.0 => {
                let why = format!("{n} answers a seed at rollout.val_temperature 0 are {n} copies of the greedy one");
                return invalid("env.val_samples", why);
            }
            _ => {}
        }
        let seeds_needed = self.schedule.steps as u64 * self.env.groups as u64 + self.sft.steps as u64 * 1024;
        if self.env.train_seed_start.saturating_add(seeds_needed) > self.env.val_seed_start
            && self.env.val_seed_start > self.env.train_seed_start
        {
            return invalid("env.val_seed_start", "training seeds would reach the held-out seeds".into());
        }
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
    let folder_model = |s: &str| matches!(s.parse::<ModelSource>(), Ok(ModelSource::Folder(_)));
    fn field<'a>(doc: &'a mut toml::Table, table: &str, key: &str) -> Option<&'a mut toml::Value> {
        doc.get_mut(table).and_then(toml::Value::as_table_mut).and_then(|t| t.get_mut(key))
    }
    // Names that are no file here stay as they are: a server, a registry reference.
    let file =
        |s: &str| !s.starts_with(vagen_runtime::openenv::PREFIX) && !s.starts_with(vagen_registry::reference::SCHEME);
    join(field(doc, "env", "plugin"), folder, file);
    join(field(doc, "sft", "data"), folder, |_| true);
    // A harness runs in the config's folder unless it names another.
    if let Some(h) = field(doc, "env", "harness").and_then(toml::Value::as_table_mut) {
        join(h.get_mut("tasks"), folder, |_| true);
        let dir = h.entry("dir").or_insert_with(|| toml::Value::String(".".into()));
        join(Some(dir), folder, |_| true);
    }
    join(field(doc, "model", "path"), folder, folder_model);
    join(field(doc, "judge", "model"), folder, folder_model);
    if let Some(toml::Value::Array(rewards)) = doc.get_mut("reward") {
        for r in rewards.iter_mut().filter_map(toml::Value::as_table_mut) {
            join(r.get_mut("plugin"), folder, file);
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
    use super::optim::LrSchedule;
    use super::{OptimSection, TrainConfig, overridden, table_json};

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
