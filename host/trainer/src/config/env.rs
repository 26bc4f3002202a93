//! `[env]`: which environment, with which seeds, in which batch shape.

use crate::config_error::{ConfigError, invalid};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Which environment, with which seeds, in which batch shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvSection {
    /// The plugin file (`.wasm` or `.so`); relative to the config file's folder (a `--set`
    /// one to the working folder). Or an OpenEnv server, `openenv+http://HOST:PORT`.
    /// Empty with `harness`.
    #[serde(default, skip_serializing_if = "is_empty_path")]
    pub plugin: PathBuf,
    /// Instead of a plugin: an agent program run once per episode against the run's
    /// recording endpoint (`vagen_serve::harness`; docs/train-an-existing-agent.md). Its
    /// `dir` and `tasks` are relative to the config file's folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harness: Option<vagen_serve::harness::HarnessConfig>,
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
    /// Answers per held-out seed. Above 1 (at a `rollout.val_temperature` above 0), `val/success`
    /// is over every answer (avg@n) and evaluations also log `val/pass@k` for k = 1, 2, 4, … n.
    #[serde(default = "one")]
    pub val_samples: usize,
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

fn is_empty_path(p: &std::path::Path) -> bool {
    p.as_os_str().is_empty()
}

fn default_max_failure_rate() -> f64 {
    0.25
}

fn one() -> usize {
    1
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

impl EnvSection {
    /// A plugin that is there (or a server), `openenv` only for a server, whole groups and
    /// a failure share.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(h) = &self.harness {
            if !is_empty_path(&self.plugin) {
                return invalid(
                    "env.harness",
                    "a run plays a plugin or a harness: set env.plugin or env.harness, not both".into(),
                );
            }
            h.check().map_err(|message| ConfigError::Invalid { field: "env.harness", message })?;
            if let Some(tasks) = &h.tasks
                && !tasks.is_file()
            {
                return invalid("env.harness", format!("tasks {} does not exist", tasks.display()));
            }
            if self.openenv.is_some() || !self.config.is_empty() || !self.train_config.is_empty() {
                return invalid(
                    "env.harness",
                    "a harness takes its task on stdin, not env.config, env.train_config or env.openenv".into(),
                );
            }
            return self.validate_shape();
        }
        if is_empty_path(&self.plugin) {
            return invalid("env.plugin", "name the env's plugin (or an agent program as env.harness)".into());
        }
        let remote = vagen_runtime::is_openenv_url(&self.plugin);
        let registry = component_name(&self.plugin, "env.plugin")?;
        if !remote && !registry && !self.plugin.is_file() {
            return invalid("env.plugin", format!("{} does not exist", self.plugin.display()));
        }
        if !remote && self.openenv.is_some() {
            return invalid(
                "env.openenv",
                "it applies to an OpenEnv server (plugin = \"openenv+http://HOST:PORT\") only".into(),
            );
        }
        self.validate_shape()
    }

    /// Whole groups and a failure share.
    fn validate_shape(&self) -> Result<(), ConfigError> {
        if self.groups == 0 || self.group_size == 0 {
            return invalid("env.groups", "groups and group_size must be at least 1".into());
        }
        if !(0.0..=1.0).contains(&self.max_failure_rate) {
            return invalid("env.max_failure_rate", format!("{} is not a share in [0, 1]", self.max_failure_rate));
        }
        Ok(())
    }
}

/// Whether `name` is an `oci://` reference (checked well-formed, naming `field`), which the
/// runtime fetches: it is no file here.
pub(crate) fn component_name(name: &std::path::Path, field: &'static str) -> Result<bool, ConfigError> {
    if !vagen_registry::is_oci(name) {
        return Ok(false);
    }
    let text = name.to_str().expect("an oci:// name is UTF-8");
    vagen_registry::OciRef::parse(text).map_err(|e| ConfigError::Invalid { field, message: e.to_string() })?;
    Ok(true)
}
