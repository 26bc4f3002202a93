//! OpenEnv servers as environments: `openenv+http://HOST:PORT[/PREFIX][?OPTIONS]` works
//! wherever a plugin path does. Spoken as openenv-core 0.3.0's clients speak it: `/schema`
//! and `/metadata` read over HTTP at load, then a WebSocket session at `/ws` per instance,
//! opened at its first `reset` (so creating instances never touches the network and a dead
//! server fails episodes, not the run). A remote failure (refused, timed out, closed,
//! a server error, a malformed observation) is [`Error::Remote`], a fault: that episode
//! fails, the session is dropped and the next `reset` opens a new one.
//!
//! An instance's JSON config is sent with every `reset` as extra keyword arguments (an
//! openenv-core env receives those its `reset` declares).

mod images;
mod options;
mod schema;
mod session;

pub use images::{from_data_url, to_data_url};
pub use options::OpenEnvOptions;
pub use schema::X_VAGEN;

use crate::cache::sha256_hex;
use crate::{ActionSpace, Environment, Error, Limits, Manifest, Metric, Observation, Plugin, PluginInfo, StepResult};
use schema::{Described, FieldKind};
use serde_json::{Map, Value, json};
use session::{Failure, Session};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a plugin path starts with to name an OpenEnv server.
pub const PREFIX: &str = "openenv+";

/// Whether `path` names an OpenEnv server rather than a file.
pub fn is_openenv_url(path: &Path) -> bool {
    path.to_str().is_some_and(|s| s.starts_with(PREFIX))
}

#[derive(Clone)]
pub struct OpenEnvPlugin {
    shared: Arc<Shared>,
}

struct Shared {
    host: String,
    port: u16,
    ws_url: String,
    timeout: Duration,
    retries: u32,
    described: Described,
    space: ActionSpace,
    info: PluginInfo,
    limits: Limits,
}

impl OpenEnvPlugin {
    /// Reads the server's `/schema` and `/metadata`. `table` holds options given outside
    /// the URL (a config's `[env.openenv]`); the URL's query overrides them.
    pub fn connect(spec: &str, table: OpenEnvOptions, limits: Limits) -> Result<Self, Error> {
        let started = Instant::now();
        let bad = |why: String| Error::BadConfig(format!("{spec}: {why}"));
        let rest = spec.strip_prefix(PREFIX).ok_or_else(|| bad(format!("expected {PREFIX}http://HOST:PORT")))?;
        let mut url = url::Url::parse(rest).map_err(|e| bad(e.to_string()))?;
        match url.scheme() {
            "http" => {}
            "https" => {
                return Err(bad("https is not spoken here yet: reach the server over http (an SSH tunnel or a local proxy in front of a TLS one)".into()));
            }
            other => return Err(bad(format!("the scheme is {other}; expected {PREFIX}http://HOST:PORT"))),
        }
        let options =
            table.merged(OpenEnvOptions::from_query(url.query_pairs().into_owned()).map_err(|e| bad(e.to_string()))?);
        url.set_query(None);
        url.set_fragment(None);
        let host = match url.host() {
            Some(url::Host::Ipv6(a)) => a.to_string(),
            Some(h) => h.to_string(),
            None => return Err(bad("no host".into())),
        };
        let port = url.port_or_known_default().unwrap_or(80);
        let base = url.as_str().trim_end_matches('/').to_string();
        let timeout = options.timeout()?;
        let agent: ureq::Agent = ureq::Agent::config_builder().timeout_global(Some(timeout)).build().into();
        let get = |route: &str| -> Result<(Value, Vec<u8>), Error> {
            let remote =
                |message: String| Error::Remote { call: "load", message: format!("GET {base}{route}: {message}") };
            let mut response = agent.get(format!("{base}{route}")).call().map_err(|e| remote(e.to_string()))?;
            let bytes =
                response.body_mut().with_config().limit(16 << 20).read_to_vec().map_err(|e| remote(e.to_string()))?;
            let value = serde_json::from_slice(&bytes).map_err(|e| remote(format!("not JSON ({e})")))?;
            Ok((value, bytes))
        };
        let (schema, schema_bytes) = get("/schema")?;
        // Optional in the protocol's spirit: a server without it is named by its address.
        let metadata = get("/metadata").map(|(v, _)| v).unwrap_or_else(|_| json!({}));
        let mut described = schema::describe(&schema, &metadata, &options)
            .map_err(|message| Error::NotAPlugin { path: spec.into(), reason: message })?;
        if described.manifest.name == "openenv" {
            described.manifest.name = format!("openenv-{host}-{port}");
        }
        crate::checks::manifest(&described.manifest)?;
        let info = PluginInfo {
            path: PathBuf::from(spec),
            sha256: sha256_hex(&schema_bytes),
            build_inputs: None,
            size_bytes: 0,
            kind: "openenv",
            wit_version: "openenv-core 0.3 protocol".into(),
            imports: Vec::new(),
            load_ms: started.elapsed().as_secs_f64() * 1e3,
            from_cache: false,
        };
        let ws_url = format!(
            "ws://{}{}{}/ws",
            url.host_str().unwrap_or_default(),
            url.port().map(|p| format!(":{p}")).unwrap_or_default(),
            url.path().trim_end_matches('/')
        );
        let space = described.action_space();
        let shared = Shared { host, port, ws_url, timeout, retries: options.retries(), described, space, info, limits };
        Ok(Self { shared: Arc::new(shared) })
    }
}

impl Plugin for OpenEnvPlugin {
    fn manifest(&self) -> &Manifest {
        &self.shared.described.manifest
    }

    fn info(&self) -> &PluginInfo {
        &self.shared.info
    }

    fn limits(&self) -> &Limits {
        &self.shared.limits
    }

    fn create(&self, config: &str) -> Result<Box<dyn Environment>, Error> {
        let kwargs = match config.trim() {
            "" => Map::new(),
            text => match serde_json::from_str(text) {
                Ok(Value::Object(o)) => o,
                Ok(_) => {
                    return Err(Error::BadConfig("an OpenEnv env's config is a JSON object of reset arguments".into()));
                }
                Err(e) => return Err(Error::BadConfig(format!("the config is not JSON: {e}"))),
            },
        };
        if kwargs.contains_key("seed") {
            return Err(Error::BadConfig("the config may not set `seed`: each episode's seed is the run's".into()));
        }
        Ok(Box::new(OpenEnvEnv {
            shared: self.shared.clone(),
            kwargs,
            session: None,
            playing: false,
            system_prompt: None,
            episode_bytes: 0,
        }))
    }
}

pub struct OpenEnvEnv {
    shared: Arc<Shared>,
    kwargs: Map<String, Value>,
    session: Option<Session>,
    /// Reset and not done: a step is allowed.
    playing: bool,
    /// What the last reset's observation said (serve-env sends the instance's own).
    system_prompt: Option<String>,
    episode_bytes: u64,
}

impl OpenEnvEnv {
    /// One call on the session (opened if there is none); a transport failure drops it.
    fn call(&mut self, call: &'static str, message: &Value) -> Result<Result<Value, (String, String)>, Error> {
        let s = &self.shared;
        if self.session.is_none() {
            let opened = Session::open(&s.host, s.port, &s.ws_url, s.timeout, s.retries);
            self.session = Some(opened.map_err(|message| Error::Remote { call, message })?);
        }
        let session = self.session.as_mut().expect("opened above");
        match session.call(message) {
            Ok(reply) => Ok(Ok(reply)),
            Err(Failure::Server { code, message }) => Ok(Err((code, message))),
            Err(Failure::Transport(message)) => {
                self.session = None;
                self.playing = false;
                Err(Error::Remote { call, message })
            }
        }
    }

    /// A server's error frame as this call's failure: the episode is over, and the server
    /// may hold it in any state, so the next reset starts a new session.
    fn server_failure(&mut self, call: &'static str, code: String, message: String) -> Error {
        self.playing = false;
        if let Some(s) = self.session.take() {
            s.close();
        }
        Error::Remote { call, message: format!("the server answered {code}: {message}") }
    }

    /// An `observation` frame's `data`: the observation, reward and done.
    fn read(&self, call: &'static str, reply: &Value) -> Result<(Observation, f64, bool, Map<String, Value>), Error> {
        let malformed = |detail: String| Error::Remote { call, message: format!("a malformed reply: {detail}") };
        if reply.get("type").and_then(Value::as_str) != Some("observation") {
            return Err(malformed(format!("expected an observation frame, got {}", short(reply))));
        }
        let data = reply.get("data").ok_or_else(|| malformed("no data".into()))?;
        let fields = match data.get("observation") {
            Some(Value::Object(o)) => o.clone(),
            other => return Err(malformed(format!("the observation is {}", other.map_or("missing".into(), short)))),
        };
        let reward = match data.get("reward") {
            None | Some(Value::Null) => 0.0,
            Some(Value::Bool(b)) => f64::from(u8::from(*b)),
            Some(v) => v.as_f64().ok_or_else(|| malformed(format!("the reward is {}", short(v))))?,
        };
        let done = match data.get("done") {
            None => false,
            Some(v) => v.as_bool().ok_or_else(|| malformed(format!("done is {}", short(v))))?,
        };
        let d = &self.shared.described;
        let mut observation = Observation::text(match d.observation_field.as_deref().and_then(|f| fields.get(f)) {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => fields
                .iter()
                .map(|(k, v)| format!("{k}: {}", v.as_str().map_or_else(|| v.to_string(), String::from)))
                .collect::<Vec<_>>()
                .join("\n"),
        });
        if d.vagen {
            let urls = fields.get("images").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
            // Counted before any is decoded: each may hold up to `max_image_pixels`.
            let max = self.shared.limits.max_images;
            if urls.len() > max {
                return Err(Error::Malformed { call, detail: format!("{} images (limit {max})", urls.len()) });
            }
            for url in urls {
                let url = url.as_str().ok_or_else(|| malformed("an image that is not a string".into()))?;
                let image = from_data_url(url, self.shared.limits.max_image_pixels).map_err(malformed)?;
                observation.images.push(image);
            }
        }
        Ok((observation, reward, done, fields))
    }
}

fn short(v: &Value) -> String {
    let mut s = v.to_string();
    if s.len() > 200 {
        let cut = (0..=200).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
        s.truncate(cut);
        s.push('…');
    }
    s
}

impl Environment for OpenEnvEnv {
    fn manifest(&self) -> &Manifest {
        &self.shared.described.manifest
    }

    fn action_space(&self) -> &ActionSpace {
        &self.shared.space
    }

    fn system_prompt(&mut self) -> Result<String, Error> {
        Ok(self.system_prompt.clone().unwrap_or_else(|| self.shared.described.system_prompt.clone()))
    }

    fn reset(&mut self, seed: u64) -> Result<Observation, Error> {
        self.playing = false;
        let mut data = self.kwargs.clone();
        data.insert("seed".into(), json!(seed));
        let message = json!({"type": "reset", "data": data});
        // A session the server dropped since the last episode: one more try on a new one.
        let had_session = self.session.is_some();
        let reply = match self.call("reset", &message) {
            Err(Error::Remote { .. }) if had_session && self.session.is_none() => self.call("reset", &message)?,
            other => other?,
        };
        let reply = reply.map_err(|(code, message)| self.server_failure("reset", code, message))?;
        let (observation, _, done, fields) = self.read("reset", &reply)?;
        if let Some(p) = fields.get("system_prompt").and_then(Value::as_str).filter(|_| self.shared.described.vagen) {
            self.system_prompt = Some(p.to_string());
        }
        crate::checks::reset(&observation, &self.shared.limits, &mut self.episode_bytes)?;
        self.playing = !done;
        Ok(observation)
    }

    fn step(&mut self, answer: &str) -> Result<StepResult, Error> {
        if !self.playing {
            return Err(Error::InvalidState("step before reset, or after the episode ended".into()));
        }
        let answer = self.shared.limits.cut_answer(answer);
        let d = &self.shared.described;
        let value = match parse_value(d.kind, answer) {
            Ok(v) => v,
            Err(why) => return Ok(invalid(format!("Invalid action: {why}."))),
        };
        let message = json!({"type": "step", "data": {d.action_field.clone(): value}});
        let reply = match self.call("step", &message)? {
            Ok(reply) => reply,
            // The answer did not fit the action schema: an invalid action, as our own envs
            // answer one; the server's env did not move.
            Err((code, message)) if code == "VALIDATION_ERROR" => {
                return Ok(invalid(format!("Invalid action: {message}.")));
            }
            Err((code, message)) => return Err(self.server_failure("step", code, message)),
        };
        let (observation, reward, done, fields) = self.read("step", &reply)?;
        let d = &self.shared.described;
        let success = match d.success_field.as_deref().map(|f| fields.get(f)) {
            Some(Some(Value::Bool(b))) => *b,
            Some(Some(other)) => {
                return Err(Error::Remote {
                    call: "step",
                    message: format!("a malformed reply: success is {}", short(other)),
                });
            }
            Some(None) => false,
            None => done && reward > 0.0,
        };
        let count = |key: &str, default: u32| match (d.vagen, fields.get(key).and_then(Value::as_u64)) {
            (true, Some(n)) => n.min(u32::MAX as u64) as u32,
            _ => default,
        };
        let metrics = match (d.vagen, fields.get("metrics")) {
            (true, Some(Value::Object(m))) => {
                m.iter().filter_map(|(name, v)| Some(Metric { name: name.clone(), value: v.as_f64()? })).collect()
            }
            _ => Vec::new(),
        };
        let result = StepResult {
            observation,
            reward,
            done,
            success,
            valid_actions: count("valid_actions", 1),
            effective_actions: count("effective_actions", 1),
            metrics,
        };
        crate::checks::step(&result, &self.shared.limits, &self.shared.space, &mut self.episode_bytes)
            .map_err(|e| Error::Remote { call: "step", message: format!("a malformed reply: {e}") })?;
        self.playing = !done;
        Ok(result)
    }

    fn describe_state(&mut self) -> Result<String, Error> {
        let reply = self
            .call("describe-state", &json!({"type": "state"}))?
            .map_err(|(code, message)| self.server_failure("describe-state", code, message))?;
        let data = reply.get("data").cloned().unwrap_or(Value::Null);
        Ok(match data.get("description").and_then(Value::as_str).filter(|_| self.shared.described.vagen) {
            Some(d) => d.to_string(),
            None => data.to_string(),
        })
    }

    fn oracle(&mut self) -> Result<Option<String>, Error> {
        Ok(None)
    }
}

impl Drop for OpenEnvEnv {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            s.close();
        }
    }
}

/// The answer as the action field's JSON value.
fn parse_value(kind: FieldKind, answer: &str) -> Result<Value, String> {
    let t = answer.trim();
    match kind {
        FieldKind::Text => Ok(Value::String(answer.to_string())),
        FieldKind::Integer => t.parse::<i64>().map(Value::from).map_err(|_| format!("{t:?} is not an integer")),
        FieldKind::Number => match t.parse::<f64>() {
            Ok(x) if x.is_finite() => Ok(json!(x)),
            _ => Err(format!("{t:?} is not a number")),
        },
        FieldKind::Boolean => match t.to_ascii_lowercase().as_str() {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            _ => Err(format!("{t:?} is not true or false")),
        },
    }
}

/// The step result of an answer that never reached the env.
fn invalid(text: String) -> StepResult {
    StepResult {
        observation: Observation::text(text),
        reward: 0.0,
        done: false,
        success: false,
        valid_actions: 0,
        effective_actions: 0,
        metrics: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_become_the_fields_type_or_an_invalid_action() {
        assert_eq!(parse_value(FieldKind::Text, " left "), Ok(json!(" left ")));
        assert_eq!(parse_value(FieldKind::Integer, " 42\n"), Ok(json!(42)));
        assert_eq!(parse_value(FieldKind::Number, "0.5"), Ok(json!(0.5)));
        assert_eq!(parse_value(FieldKind::Boolean, "True"), Ok(json!(true)));
        assert!(parse_value(FieldKind::Integer, "forty").unwrap_err().contains("\"forty\" is not an integer"));
        assert!(parse_value(FieldKind::Number, "NaN").is_err());
        assert!(parse_value(FieldKind::Boolean, "yes").is_err());
    }

    #[test]
    fn a_bad_url_or_an_unreachable_server_is_named() {
        let limits = Limits::default();
        let connect =
            |spec: &str| OpenEnvPlugin::connect(spec, OpenEnvOptions::default(), limits.clone()).err().unwrap();
        assert!(connect("openenv+https://example.org").to_string().contains("https is not spoken"));
        assert!(connect("openenv+ftp://x").to_string().contains("the scheme is ftp"));
        assert!(connect("openenv+http://127.0.0.1:9?timeout_s=soon").to_string().contains("not a number"));
        // A port nothing listens on (9, discard, is closed on test machines).
        let err = connect("openenv+http://127.0.0.1:9?timeout_s=2");
        assert!(matches!(err, Error::Remote { call: "load", .. }) && err.to_string().contains("/schema"), "{err}");
        assert!(err.is_fault() && err.kind() == "remote");
    }
}
