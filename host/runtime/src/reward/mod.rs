//! Reward functions as sandboxed components (`wit/v0.3.0/reward.wit`): loaded and
//! limited as environments are (deadline per call, memory cap, fuel, typed errors), with
//! the host's [`Judge`] as their only capability. A scorer scores a batch of turns and
//! answers one entry per turn; a fault discards the instance, as for environments.

mod bindings;
pub mod conformance;

pub(crate) use bindings::add_judge;

use crate::cache::sha256_hex;
use crate::runtime::Runtime;
use crate::sandbox::{Determinism, Sandbox};
use crate::wasm::{arm, check_header, classify, compile, new_store};
use crate::{Error, Image, Metric, guest_text};
use bindings::{RewardPre, wit};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use wasmtime::Store;
use wasmtime::component::ResourceAny;

/// The export a reward component must have.
pub const REWARD_EXPORT: &str = "vagen:env/reward@0.3.0";

/// What a reward component says of itself.
#[derive(Debug, Clone, PartialEq)]
pub struct RewardManifest {
    pub name: String,
    pub version: String,
    pub description: String,
    /// A JSON object.
    pub default_config: String,
}

/// One turn, after the environment stepped its answer (see `reward.wit`'s `turn`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Turn {
    pub env_name: String,
    pub format: String,
    pub response: String,
    pub think: Option<String>,
    pub observation: Option<String>,
    pub prediction: Option<String>,
    pub answer: Option<String>,
    pub format_ok: bool,
    pub env_reward: f64,
    pub done: bool,
    pub success: bool,
    pub state_before: String,
    pub state_after: String,
    pub images_before: Vec<Arc<Image>>,
    pub images_after: Vec<Arc<Image>>,
}

/// A turn's reward and its named figures.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnScore {
    pub reward: f64,
    pub metrics: Vec<Metric>,
}

/// A piece of a judge's chat message.
#[derive(Debug, Clone, PartialEq)]
pub enum JudgePart {
    Text(String),
    Image(Image),
}

#[derive(Debug, Clone, PartialEq)]
pub struct JudgeMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    pub content: Vec<JudgePart>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct JudgeRequest {
    pub messages: Vec<JudgeMessage>,
    pub max_tokens: u32,
    pub temperature: f64,
}

/// The language model a reward component may ask (the run's own engine, or an endpoint).
pub trait Judge: Send + Sync {
    /// One answer per request, in order: the completion's text or why there is none.
    fn complete(&self, requests: &[JudgeRequest]) -> Vec<Result<String, String>>;
    /// Running totals for the logs (calls, requests, retries, …), by name.
    fn counts(&self) -> Vec<(&'static str, usize)> {
        vec![]
    }
}

/// A loaded, type-checked reward component.
#[derive(Clone)]
pub struct RewardPlugin {
    shared: Arc<Shared>,
}

struct Shared {
    runtime: Runtime,
    pre: RewardPre<Sandbox>,
    manifest: RewardManifest,
    path: PathBuf,
    sha256: String,
    size_bytes: u64,
}

impl Runtime {
    /// Loads a reward component (`.wasm`, exporting `vagen:env/reward@0.3.0`).
    pub fn load_reward(&self, path: impl AsRef<Path>) -> Result<RewardPlugin, Error> {
        RewardPlugin::load(self.clone(), &crate::runtime::locate(path.as_ref())?)
    }
}

impl RewardPlugin {
    fn load(runtime: Runtime, path: &Path) -> Result<Self, Error> {
        let bytes = crate::runtime::read_plugin_file(path)?;
        check_header(path, &bytes)?;
        let inner = &runtime.inner;
        let sha256 = sha256_hex(&bytes);
        let (component, _) = compile(&runtime, path, &bytes, &sha256)?;
        let exports: Vec<String> =
            component.component_type().exports(&inner.engine).map(|(n, _)| n.to_string()).collect();
        if !exports.iter().any(|e| e == REWARD_EXPORT) {
            let listed = if exports.is_empty() { "nothing".to_string() } else { exports.join(", ") };
            return Err(Error::NotAPlugin {
                path: path.into(),
                reason: format!("it exports {listed}, not {REWARD_EXPORT} (a reward function)"),
            });
        }
        let instance_pre = inner
            .linker
            .instantiate_pre(&component)
            .map_err(|e| Error::UnsupportedImport { path: path.into(), detail: format!("{e:#}") })?;
        let pre = RewardPre::new(instance_pre).map_err(|e| Error::NotAPlugin {
            path: path.into(),
            reason: format!("its exports do not match {REWARD_EXPORT}: {e:#}"),
        })?;
        let manifest = read_manifest(&runtime, &pre)?;
        let size_bytes = bytes.len() as u64;
        let shared = Shared { runtime, pre, manifest, path: path.into(), sha256, size_bytes };
        Ok(RewardPlugin { shared: Arc::new(shared) })
    }

    pub fn manifest(&self) -> &RewardManifest {
        &self.shared.manifest
    }

    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// The file's SHA-256, hex.
    pub fn sha256(&self) -> &str {
        &self.shared.sha256
    }

    /// The file's size.
    pub fn size_bytes(&self) -> u64 {
        self.shared.size_bytes
    }

    /// A scorer of `config` (JSON; `""` for the defaults) that asks `judge`, if any.
    pub fn create(&self, config: &str, judge: Option<Arc<dyn Judge>>) -> Result<Scorer, Error> {
        let mut scorer = Scorer { shared: self.shared.clone(), config: config.to_string(), judge, live: None };
        scorer.live()?;
        Ok(scorer)
    }
}

fn read_manifest(runtime: &Runtime, pre: &RewardPre<Sandbox>) -> Result<RewardManifest, Error> {
    let limits = &runtime.inner.limits;
    let (mut store, det) = new_store(runtime);
    arm(&mut store, limits.create_timeout(), limits.fuel_per_call());
    let manifest = pre
        .instantiate(&mut store)
        .and_then(|b| b.vagen_env_reward().call_get_manifest(&mut store))
        .map_err(|e| classify(e, "manifest", &store, &det, limits.create_timeout(), limits.fuel_per_call()))?;
    let manifest = bindings::manifest(manifest);
    if manifest.name.is_empty() || !manifest.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return Err(Error::Malformed {
            call: "manifest",
            detail: format!("name {:?} must be non-empty ASCII letters, digits, '-' or '_'", manifest.name),
        });
    }
    if !serde_json::from_str::<serde_json::Value>(&manifest.default_config).is_ok_and(|v| v.is_object()) {
        return Err(Error::Malformed { call: "manifest", detail: "default-config is not a JSON object".into() });
    }
    Ok(manifest)
}

/// One configured reward function in its own store.
pub struct Scorer {
    shared: Arc<Shared>,
    config: String,
    judge: Option<Arc<dyn Judge>>,
    live: Option<Live>,
}

struct Live {
    store: Store<Sandbox>,
    det: Determinism,
    bindings: bindings::RewardFunction,
    handle: ResourceAny,
}

impl Scorer {
    pub fn manifest(&self) -> &RewardManifest {
        &self.shared.manifest
    }

    fn live(&mut self) -> Result<&mut Live, Error> {
        if self.live.is_none() {
            let limits = &self.shared.runtime.inner.limits;
            let (timeout, fuel) = (limits.create_timeout(), limits.fuel_per_call());
            let (mut store, det) = new_store(&self.shared.runtime);
            store.data_mut().judge = self.judge.clone();
            store.data_mut().judge_budget =
                crate::sandbox::JudgeBudget { calls: limits.max_judge_calls, credit: limits.judge_credit() };
            arm(&mut store, timeout, fuel);
            let created = self.shared.pre.instantiate(&mut store).and_then(|b| {
                let made = b.vagen_env_reward().scorer().call_create(&mut store, &self.config)?;
                Ok((b, made))
            });
            self.live = Some(match created {
                Ok((bindings, Ok(handle))) => Live { store, det, bindings, handle },
                Ok((_, Err(e))) => return Err(bindings::guest_error(e, "create")),
                Err(e) => return Err(classify(e, "create", &store, &det, timeout, fuel)),
            });
        }
        Ok(self.live.as_mut().expect("just created"))
    }

    /// One entry per turn: its score, or why the component could not score it. The call
    /// itself fails (and the instance is discarded) on a trap, a deadline, the memory cap,
    /// or an answer of the wrong length.
    pub fn score(&mut self, turns: &[Turn]) -> Result<Vec<Result<TurnScore, String>>, Error> {
        let limits = self.shared.runtime.inner.limits.clone();
        let (timeout, fuel) = (limits.call_timeout(), limits.fuel_per_call());
        let wit_turns: Vec<wit::Turn> = turns.iter().map(bindings::turn).collect();
        let live = self.live()?;
        arm(&mut live.store, timeout, fuel);
        let scorer = live.bindings.vagen_env_reward().scorer();
        let out = match scorer.call_score(&mut live.store, live.handle, &wit_turns) {
            Ok(out) => out,
            Err(e) => {
                let err = classify(e, "score", &live.store, &live.det, timeout, fuel);
                self.live = None;
                return Err(err);
            }
        };
        if out.len() != turns.len() {
            self.live = None;
            return Err(Error::Malformed {
                call: "score",
                detail: format!("{} scores for {} turns", out.len(), turns.len()),
            });
        }
        Ok(out
            .into_iter()
            .map(|r| match r {
                Ok(s) => bindings::turn_score(s, &limits),
                Err(e) => Err(guest_text(&e)),
            })
            .collect())
    }
}
