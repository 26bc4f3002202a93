//! One client's instance and what it may ask of it, whatever the transport: reset, step and
//! state as JSON in, JSON or a [`Refusal`] out. HTTP answers a refusal with its status,
//! the WebSocket with an `error` frame of its code.

use axum::http::StatusCode;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use vagen_runtime::{Environment, Error, Observation, Plugin, StepResult};

/// Why a request was not served: the HTTP status, the WebSocket error code (openenv-core's
/// where one fits) and a message naming the problem.
#[derive(Debug)]
pub struct Refusal {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl Refusal {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Refusal { status, code, message: message.into() }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "VALIDATION_ERROR", message)
    }
}

/// What every instance of the server shares.
pub struct Served {
    pub plugin: Arc<dyn Plugin>,
    /// `--config`: what a reset without its own `config` plays.
    pub config: String,
    /// Bytes an answer may have (`--max-action-kib`).
    pub max_answer_bytes: usize,
}

/// A client's instance and its episode.
pub struct Slot {
    env: Box<dyn Environment>,
    /// The config the instance was made with.
    config: String,
    pub episode_id: String,
    seed: Option<u64>,
    step_count: u32,
    playing: bool,
}

impl Slot {
    pub fn new(served: &Served, episode_id: String) -> Result<Self, Refusal> {
        let env = create(served, &served.config)?;
        Ok(Slot { env, config: served.config.clone(), episode_id, seed: None, step_count: 0, playing: false })
    }

    /// `args`: openenv-core's reset arguments we know: `seed` (a non-negative integer;
    /// absent, a fresh one), `episode_id` (a name for the episode) and `config` (a JSON object
    /// replacing `--config` for this client). Anything else is refused by name.
    pub fn reset(&mut self, served: &Served, args: &Map<String, Value>) -> Result<Value, Refusal> {
        if let Some(key) = args.keys().find(|k| !["seed", "episode_id", "config"].contains(&k.as_str())) {
            return Err(Refusal::invalid(format!(
                "reset has no argument {key:?}: it takes seed, episode_id and config (a JSON object of the env's settings)"
            )));
        }
        let seed = match args.get("seed") {
            None | Some(Value::Null) => vagen_serve::fresh_seed(),
            Some(v) => v
                .as_u64()
                .ok_or_else(|| Refusal::invalid(format!("seed must be an integer from 0 to 2^64-1, not {v}")))?,
        };
        if let Some(id) = args.get("episode_id").filter(|v| !v.is_null()) {
            match id.as_str() {
                Some(s) if !s.is_empty() && s.len() <= 255 => self.episode_id = s.to_string(),
                _ => return Err(Refusal::invalid("episode_id must be a string of 1 to 255 bytes")),
            }
        }
        let config = match args.get("config") {
            None | Some(Value::Null) => served.config.clone(),
            Some(Value::Object(o)) => Value::Object(o.clone()).to_string(),
            Some(other) => return Err(Refusal::invalid(format!("config must be a JSON object, not {other}"))),
        };
        if config != self.config {
            self.env = create(served, &config)?;
            self.config = config;
        }
        self.playing = false;
        let observation = self.env.reset(seed).map_err(|e| failed("reset", e))?;
        let system_prompt = self.env.system_prompt().map_err(|e| failed("system_prompt", e))?;
        (self.seed, self.step_count, self.playing) = (Some(seed), 0, true);
        let mut fields = observation_fields(&observation, self, None);
        fields.insert("system_prompt".into(), json!(system_prompt));
        Ok(json!({"observation": fields, "reward": null, "done": false}))
    }

    /// `action`: `{"answer": TEXT}` (`metadata`, openenv-core's, is allowed and unused).
    pub fn step(&mut self, served: &Served, action: &Value) -> Result<Value, Refusal> {
        let answer = answer_of(action, served.max_answer_bytes)?;
        if !self.playing {
            let why = if self.seed.is_none() { "before reset" } else { "after the episode ended" };
            return Err(Refusal::new(StatusCode::CONFLICT, "INVALID_STATE", format!("step {why}: reset first")));
        }
        let result = match self.env.step(answer) {
            Ok(r) => r,
            Err(e) => {
                self.playing = false;
                return Err(failed("step", e));
            }
        };
        self.step_count += 1;
        self.playing = !result.done;
        let fields = observation_fields(&result.observation, self, Some(&result));
        Ok(json!({"observation": fields, "reward": result.reward, "done": result.done}))
    }

    /// openenv-core's state (`episode_id`, `step_count`) and ours: the seed, whether an
    /// episode is on, and the env's own description of its state (`describe-state`).
    pub fn state(&mut self) -> Result<Value, Refusal> {
        let description = match self.seed {
            Some(_) => Some(self.env.describe_state().map_err(|e| failed("describe_state", e))?),
            None => None,
        };
        Ok(json!({
            "episode_id": self.episode_id,
            "step_count": self.step_count,
            "seed": self.seed,
            "playing": self.playing,
            "description": description,
        }))
    }
}

fn create(served: &Served, config: &str) -> Result<Box<dyn Environment>, Refusal> {
    served.plugin.create(config).map_err(|e| match e {
        Error::BadConfig(why) => Refusal::invalid(format!("the env refused the config: {why}")),
        other => failed("create", other),
    })
}

/// An env call's failure. A fault (trap, timeout, memory, fuel, malformed result) ends the
/// episode and the instance is rebuilt behind it; the server goes on.
fn failed(call: &str, e: Error) -> Refusal {
    match e {
        Error::InvalidState(why) => Refusal::new(StatusCode::CONFLICT, "INVALID_STATE", why),
        Error::BadConfig(why) => Refusal::invalid(why),
        e if e.is_fault() => Refusal::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "EXECUTION_ERROR",
            format!(
                "the environment failed in {call} ({}): {e}; this episode is over, reset to play another",
                e.kind()
            ),
        ),
        e => Refusal::new(StatusCode::INTERNAL_SERVER_ERROR, "EXECUTION_ERROR", format!("{call}: {e}")),
    }
}

fn answer_of(action: &Value, max_bytes: usize) -> Result<&str, Refusal> {
    let Some(object) = action.as_object() else {
        return Err(Refusal::invalid(format!(
            "the action must be a JSON object {{\"answer\": TEXT}}, not {}",
            kind(action)
        )));
    };
    if let Some(key) = object.keys().find(|k| !["answer", "metadata"].contains(&k.as_str())) {
        return Err(Refusal::invalid(format!("the action has no field {key:?}: it is {{\"answer\": TEXT}}")));
    }
    let answer = match object.get("answer") {
        Some(Value::String(s)) => s.as_str(),
        Some(other) => {
            return Err(Refusal::invalid(format!("the action's answer must be a string, not {}", kind(other))));
        }
        None => return Err(Refusal::invalid("the action has no answer: it is {\"answer\": TEXT}")),
    };
    if answer.len() > max_bytes {
        return Err(Refusal::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "ACTION_TOO_LARGE",
            format!("an answer of {} bytes is over the {max_bytes} this server takes (--max-action-kib)", answer.len()),
        ));
    }
    Ok(answer)
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The observation's fields (the schema's `observation`): text, images as PNG data URLs,
/// and after a step what our step result adds.
fn observation_fields(o: &Observation, slot: &Slot, step: Option<&StepResult>) -> Map<String, Value> {
    let images: Vec<Value> = o.images.iter().map(|i| Value::String(vagen_runtime::openenv::to_data_url(i))).collect();
    let metrics: Map<String, Value> =
        step.into_iter().flat_map(|s| &s.metrics).map(|m| (m.name.clone(), json!(m.value))).collect();
    let mut fields = Map::new();
    fields.insert("text".into(), json!(o.text));
    fields.insert("images".into(), Value::Array(images));
    fields.insert("episode_id".into(), json!(slot.episode_id));
    fields.insert("seed".into(), json!(slot.seed));
    fields.insert("turn".into(), json!(slot.step_count));
    fields.insert("success".into(), json!(step.is_some_and(|s| s.success)));
    fields.insert("valid_actions".into(), json!(step.map_or(0, |s| s.valid_actions)));
    fields.insert("effective_actions".into(), json!(step.map_or(0, |s| s.effective_actions)));
    fields.insert("metrics".into(), Value::Object(metrics));
    fields
}
