//! The rollout's prompt pieces for Python (`vagen.Prompter`): the same functions the driver
//! builds every training and `eval` prompt with, so a Python loop prompts as they do.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::num::NonZeroUsize;
use vagen_rollout::{History, Parsed, RolloutConfig};
use vagen_runtime::{ActionSpace, Manifest};

/// One env instance's prompt settings: `[rollout]`'s prompt keys, its manifest and its
/// instance's action space.
#[pyclass(frozen, module = "vagen._native")]
pub struct NativePrompter {
    config: RolloutConfig,
    manifest: Manifest,
    space: ActionSpace,
    cap: Option<NonZeroUsize>,
}

fn bad(what: &str) -> impl Fn(serde_json::Error) -> PyErr + '_ {
    move |e| PyValueError::new_err(format!("{what}: {e}"))
}

/// `[rollout]` keys that shape prompts (the rest, sampling and layout, are the trainer's),
/// read from the defaults themselves so the list cannot fall behind the struct.
fn prompt_keys() -> Vec<String> {
    match serde_json::to_value(RolloutConfig::default()) {
        Ok(serde_json::Value::Object(m)) => m.keys().cloned().collect(),
        _ => vec![],
    }
}

/// `[rollout]`'s prompt keys and `per_turn` of `table` (a JSON object); other keys left to
/// their readers, unknown ones refused by name.
fn rollout_config(table: &str, strict: bool) -> PyResult<RolloutConfig> {
    let value: serde_json::Value = serde_json::from_str(table).map_err(bad("rollout"))?;
    let serde_json::Value::Object(mut map) = value else {
        return Err(PyValueError::new_err("rollout: expected a table of [rollout] keys"));
    };
    let per_turn = map.remove("per_turn").and_then(|v| v.as_bool()).unwrap_or(false);
    let known = prompt_keys();
    if strict && let Some(k) = map.keys().find(|k| !known.contains(k)) {
        return Err(PyValueError::new_err(format!(
            "rollout.{k}: not a prompt setting (these are: per_turn, {})",
            known.join(", ")
        )));
    }
    map.retain(|k, _| known.contains(k));
    let mut config: RolloutConfig = serde_json::from_value(serde_json::Value::Object(map)).map_err(bad("rollout"))?;
    // One sequence per turn carries no earlier turns (as the trainer lays them out).
    if per_turn {
        config.history = History::Last(0);
    }
    Ok(config)
}

#[pyfunction]
#[pyo3(signature = (rollout, manifest, action_space, max_actions_per_turn, strict))]
pub fn prompter(
    rollout: &str,
    manifest: &str,
    action_space: &str,
    max_actions_per_turn: usize,
    strict: bool,
) -> PyResult<NativePrompter> {
    Ok(NativePrompter {
        config: rollout_config(rollout, strict)?,
        manifest: serde_json::from_str(manifest).map_err(bad("manifest"))?,
        space: serde_json::from_str(action_space).map_err(bad("action space"))?,
        cap: NonZeroUsize::new(max_actions_per_turn),
    })
}

/// A training config's TOML as JSON, for `Prompter.from_config`.
#[pyfunction]
pub fn read_toml(path: std::path::PathBuf) -> PyResult<String> {
    let text = std::fs::read_to_string(&path)
        .map_err(|e| pyo3::exceptions::PyOSError::new_err(format!("{}: {e}", path.display())))?;
    let table: toml::Table =
        toml::from_str(&text).map_err(|e| PyValueError::new_err(format!("{}: {e}", path.display())))?;
    serde_json::to_string(&table).map_err(bad("config"))
}

fn parsed(json: &str) -> PyResult<Parsed> {
    serde_json::from_str(json).map_err(bad("parsed answer"))
}

#[pymethods]
impl NativePrompter {
    fn system(&self, env_system: &str) -> String {
        self.config.system_message(env_system, &self.manifest)
    }

    #[pyo3(signature = (text, description=None))]
    fn observation(&self, text: &str, description: Option<&str>) -> String {
        self.config.shown_observation(text, description)
    }

    #[pyo3(signature = (observation, feedback=None))]
    fn user(&self, observation: &str, feedback: Option<String>) -> String {
        self.config.user_message(feedback, observation)
    }

    /// (the parsed answer as JSON, the text `step` receives).
    fn read(&self, response: &str) -> (String, String) {
        let p = self.config.read_answer(response, &self.space, self.cap);
        let step = self.config.step_answer(response, &p, &self.space);
        (serde_json::to_string(&p).expect("plain data"), step)
    }

    fn feedback(&self, parsed_json: &str, valid: u32, effective: u32) -> PyResult<String> {
        Ok(vagen_rollout::feedback(&parsed(parsed_json)?, valid, effective))
    }

    fn format_reward(&self, parsed_json: &str, valid: u32) -> PyResult<f64> {
        Ok(self.config.format_reward(&parsed(parsed_json)?, valid))
    }

    /// Earlier turns a prompt carries: `None` for all.
    fn history(&self) -> Option<usize> {
        match self.config.history {
            History::All => None,
            History::Last(k) => Some(k),
        }
    }

    fn describe_state(&self) -> bool {
        self.config.describe_state
    }

    /// Where generation stops (the format's end of answer).
    fn stop(&self) -> Vec<String> {
        self.config.format.stop_strings()
    }
}
