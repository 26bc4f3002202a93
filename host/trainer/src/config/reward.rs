//! `[[reward]]` (reward functions) and `[judge]` (who answers their judge requests).

use super::model::embedded_model;
use crate::config_error::{ConfigError, Range, in_ranges, invalid};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use vagen_model::{DType, DeviceChoice, ModelSource};

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

impl RewardSection {
    /// A component that is there, and a weight within the bounds rewards keep to.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !super::env::component_name(&self.plugin, "reward.plugin")? && !self.plugin.is_file() {
            return invalid("reward.plugin", format!("{} does not exist", self.plugin.display()));
        }
        if !self.weight.is_finite() {
            return invalid("reward.weight", format!("{} is not a finite number", self.weight));
        }
        in_ranges([("reward.weight", self.weight, Range::Scale)])
    }
}

impl JudgeSection {
    /// An `openai` judge's key is the user's to name, and its limits usable.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let JudgeSection::Openai { api_key_env, concurrency, timeout_s, .. } = self else {
            return Ok(());
        };
        if let Some(name) = api_key_env {
            return invalid(
                "judge.api_key_env",
                format!(
                    "{name:?}: the API key's variable is named with `--judge-key-env` (or in \
                     ~/.config/vagen/judge.toml), never in a run's config, which could send any secret to any host"
                ),
            );
        }
        if *concurrency == 0 {
            return invalid("judge.concurrency", "must be at least 1".into());
        }
        if !(timeout_s.is_finite() && *timeout_s > 0.0) {
            return invalid("judge.timeout_s", format!("{timeout_s} must be a positive number of seconds"));
        }
        Ok(())
    }
}
