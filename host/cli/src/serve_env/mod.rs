//! `vagen-host serve-env`: one plugin served as an OpenEnv environment, speaking what
//! openenv-core 0.3.0's clients speak: a WebSocket session per client at `/ws`
//! (`reset` / `step` / `state` / `close` frames, `observation` / `state` / `error` replies),
//! and `/reset`, `/step`, `/state`, `/schema`, `/metadata`, `/health` over HTTP.
//!
//! Every client has its own sandboxed instance. Unlike openenv-core's HTTP routes, which
//! build a new env per request, ours keep the episode `/reset` started under its
//! `episode_id` (sent back in the observation): `/step` and `/state` given it continue it.
//! Instances idle past `--idle-timeout-s` are dropped; `--max-envs` bounds HTTP episodes and
//! WebSocket sessions together. A plugin's fault ends that client's episode with an error
//! (the instance is rebuilt), never the server; a malformed request gets a 4xx naming the
//! problem, in FastAPI's `{"detail": …}` shape.

mod play;
mod schema;
mod ws;

use anyhow::{Context, Result};
use axum::extract::{ConnectInfo, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Args;
use play::{Refusal, Served, Slot};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use vagen_serve::{listen, read_body};

#[derive(Args)]
pub struct ServeEnvArgs {
    /// The environment plugin (`.wasm` or `.so`).
    #[arg(long)]
    plugin: PathBuf,
    /// JSON object overriding the plugin's default config (a reset's `config` replaces it
    /// for that client).
    #[arg(long, default_value = "")]
    config: String,
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// 0 picks a free port; the address is printed on the first line of stdout.
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// Instances at most: HTTP episodes and WebSocket sessions together. Past it a new
    /// session gets openenv-core's `CAPACITY_REACHED` (HTTP: 503).
    #[arg(long, default_value = "128")]
    max_envs: NonZeroUsize,
    /// HTTP episodes one client address may hold at once (default: a quarter of
    /// `--max-envs`), so a client that never sends its episode ids back cannot take every
    /// place; past it a `/reset` gets 429.
    #[arg(long)]
    max_episodes_per_client: Option<NonZeroUsize>,
    /// An instance untouched this long is dropped (its WebSocket closed).
    #[arg(long, default_value_t = 300)]
    idle_timeout_s: u64,
    /// Longest answer a step takes (KiB); a longer one is refused (413), not cut.
    #[arg(long, default_value_t = 64)]
    max_action_kib: usize,
    /// Open connections at most; past it a new connection is closed at once.
    #[arg(long, default_value = "512")]
    max_connections: NonZeroUsize,
    /// Seconds a client has to send a request's headers, and again its body.
    #[arg(long, default_value_t = 10)]
    read_timeout_s: u64,
    /// Sandbox limit override, e.g. `--limit call_timeout_ms=500` (repeatable).
    #[arg(long = "limit", value_name = "KEY=VALUE")]
    limits: Vec<String>,
}

/// What an over-long body is read on and dropped up to, so its client reads the 413 (a text
/// answer of megabytes is a client bug worth naming, not a reset connection).
const DRAIN_BYTES: usize = 64 << 20;

pub struct Shared {
    served: Served,
    schema: Value,
    metadata: Value,
    /// HTTP episodes by episode id.
    episodes: Mutex<HashMap<String, Episode>>,
    /// Instances alive: HTTP episodes and WebSocket sessions.
    live: AtomicUsize,
    max_envs: usize,
    per_client: usize,
    idle: Duration,
    max_body: usize,
    read_timeout: Duration,
}

struct Episode {
    slot: Arc<Mutex<Slot>>,
    last: Arc<Mutex<Instant>>,
    /// The address that reset it: only it continues it (an id is no key).
    owner: IpAddr,
}

impl Shared {
    /// Takes a place for one more instance, if there is one.
    fn admit(&self) -> Result<Place<'_>, Refusal> {
        let taken =
            self.live.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < self.max_envs).then_some(n + 1));
        match taken {
            Ok(_) => Ok(Place(&self.live)),
            Err(n) => Err(Refusal::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "CAPACITY_REACHED",
                format!("Server at capacity: {n}/{} sessions active (--max-envs)", self.max_envs),
            )),
        }
    }
}

/// A counted instance; the count drops with it.
struct Place<'a>(&'a AtomicUsize);

impl Place<'_> {
    /// The instance outlives this scope (an HTTP episode): `drop_idle` or a replacing
    /// reset gives the place back.
    fn keep(self) {
        std::mem::forget(self);
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

pub fn serve_env(a: ServeEnvArgs) -> Result<()> {
    let limits = vagen_env::limits_arg::limits_from(&a.limits)?;
    let plugin = vagen_runtime::Runtime::new(limits)?
        .load(&a.plugin)
        .with_context(|| format!("loading {}", a.plugin.display()))?;
    let max_answer_bytes = a.max_action_kib.max(1) << 10;
    let served = Served { plugin, config: a.config.clone(), max_answer_bytes };
    // One instance up front: a config the env refuses stops the server before it listens,
    // and the schema carries the instance's action space and system prompt.
    let mut probe = served.plugin.create(&a.config).with_context(|| format!("--config {:?}", a.config))?;
    let system_prompt = probe.system_prompt().context("asking the env for its system prompt")?;
    let manifest = served.plugin.manifest().clone();
    let schema = schema::schema(&manifest, probe.action_space(), &system_prompt, max_answer_bytes);
    drop(probe);
    let shared = Arc::new(Shared {
        served,
        schema,
        metadata: schema::metadata(&manifest),
        episodes: Mutex::new(HashMap::new()),
        live: AtomicUsize::new(0),
        max_envs: a.max_envs.get(),
        per_client: a.max_episodes_per_client.map_or((a.max_envs.get() / 4).max(1), NonZeroUsize::get),
        idle: Duration::from_secs(a.idle_timeout_s.max(1)),
        max_body: max_answer_bytes + (64 << 10),
        read_timeout: Duration::from_secs(a.read_timeout_s),
    });
    let app = Router::new()
        .route("/health", get(|| async { Json(json!({"status": "healthy"})) }))
        .route("/metadata", get(|State(s): State<Arc<Shared>>| async move { Json(s.metadata.clone()) }))
        .route("/schema", get(|State(s): State<Arc<Shared>>| async move { Json(s.schema.clone()) }))
        .route("/reset", post(reset))
        .route("/step", post(step))
        .route("/state", get(state))
        .route("/ws", get(ws::upgrade))
        .fallback(|| async {
            detail(
                StatusCode::NOT_FOUND,
                "no such route: the routes are /reset, /step, /state, /schema, /metadata, /health and /ws",
            )
        })
        .with_state(shared.clone());
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        tokio::spawn(drop_idle(shared));
        listen(&a.host, a.port, app, a.max_connections.get(), Duration::from_secs(a.read_timeout_s)).await
    })
}

/// Drops HTTP episodes idle past the timeout, every second.
async fn drop_idle(s: Arc<Shared>) {
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let gone: Vec<Episode> = {
            let mut episodes = s.episodes.lock().expect("not poisoned");
            let idle: Vec<String> = (episodes.iter())
                .filter(|(_, e)| e.last.lock().expect("not poisoned").elapsed() > s.idle)
                .map(|(k, _)| k.clone())
                .collect();
            idle.iter().filter_map(|k| episodes.remove(k)).collect()
        };
        for _ in &gone {
            s.live.fetch_sub(1, Ordering::SeqCst);
        }
        // Dropping an instance frees its store: off the async threads.
        if !gone.is_empty() {
            tokio::task::spawn_blocking(move || drop(gone));
        }
    }
}

/// FastAPI's error shape.
fn detail(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({"detail": message.into()}))).into_response()
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        detail(self.status, self.message)
    }
}

/// Runs `f` on the slot off the async threads (env calls block: a wasm call for up to its
/// deadline).
pub async fn on_slot<T: Send + 'static>(slot: Arc<Mutex<Slot>>, f: impl FnOnce(&mut Slot) -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(move || f(&mut slot.lock().unwrap_or_else(|p| p.into_inner())))
        .await
        .expect("an env call does not panic the server: the runtime turns guest failures into errors")
}

/// The body as a JSON object (empty: `{}`), or the 4xx that says why not.
async fn object_body(s: &Shared, request: axum::extract::Request) -> Result<Map<String, Value>, Refusal> {
    let bytes = match tokio::time::timeout(s.read_timeout, read_body(request.into_body(), s.max_body, DRAIN_BYTES))
        .await
    {
        Ok(Ok(b)) => b,
        Err(_) => {
            let message = format!("the body did not arrive within {} s", s.read_timeout.as_secs());
            return Err(Refusal::new(StatusCode::REQUEST_TIMEOUT, "TIMEOUT", message));
        }
        Ok(Err(())) => {
            let message = format!("the body is over {} KiB (--max-action-kib and room for the rest)", s.max_body >> 10);
            return Err(Refusal::new(StatusCode::PAYLOAD_TOO_LARGE, "ACTION_TOO_LARGE", message));
        }
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(_) => {
            Err(Refusal::new(StatusCode::UNPROCESSABLE_ENTITY, "VALIDATION_ERROR", "the body must be a JSON object"))
        }
        Err(e) => Err(Refusal::new(StatusCode::BAD_REQUEST, "INVALID_JSON", format!("the body is not JSON: {e}"))),
    }
}

/// An HTTP episode's instance and the time it was last touched.
type Playing = (Arc<Mutex<Slot>>, Arc<Mutex<Instant>>);

fn episode_of(s: &Shared, id: Option<&Value>, route: &str, client: IpAddr) -> Result<Playing, Refusal> {
    let id = match id {
        Some(Value::String(id)) => id,
        None | Some(Value::Null) => {
            return Err(Refusal::new(
                StatusCode::BAD_REQUEST,
                "NO_EPISODE",
                format!(
                    "{route} over HTTP continues the episode /reset started: send its episode_id (in the reset's observation), or play over the /ws WebSocket"
                ),
            ));
        }
        Some(other) => return Err(Refusal::invalid(format!("episode_id must be a string, not {other}"))),
    };
    let episodes = s.episodes.lock().expect("not poisoned");
    let e = episodes.get(id).filter(|e| e.owner == client).ok_or_else(|| {
        Refusal::new(
            StatusCode::NOT_FOUND,
            "UNKNOWN_EPISODE",
            format!(
                "no episode {id:?} here: never reset, or dropped after {} s idle (--idle-timeout-s)",
                s.idle.as_secs()
            ),
        )
    })?;
    *e.last.lock().expect("not poisoned") = Instant::now();
    Ok((e.slot.clone(), e.last.clone()))
}

async fn reset(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: axum::extract::Request,
) -> Response {
    let args = match object_body(&s, request).await {
        Ok(a) => a,
        Err(r) => return r.into_response(),
    };
    let client = peer.ip();
    let existing = match args.get("episode_id") {
        Some(Value::String(id)) => {
            s.episodes.lock().expect("not poisoned").get(id).filter(|e| e.owner == client).map(|e| e.slot.clone())
        }
        _ => None,
    };
    let (slot, new) = match existing {
        Some(slot) => (slot, false),
        None => {
            let place = match s.admit() {
                Ok(p) => p,
                Err(r) => return r.into_response(),
            };
            let held = s.episodes.lock().expect("not poisoned").values().filter(|e| e.owner == client).count();
            if held >= s.per_client {
                let message = format!(
                    "{client} holds {held} HTTP episodes, the most one client may (--max-episodes-per-client): send \
                     an episode_id back to reset one of them, or wait for idle ones to go (--idle-timeout-s)"
                );
                return Refusal::new(StatusCode::TOO_MANY_REQUESTS, "TOO_MANY_EPISODES", message).into_response();
            }
            let id = format!("episode-{:016x}", vagen_serve::fresh_seed());
            let shared = s.clone();
            match tokio::task::spawn_blocking(move || Slot::new(&shared.served, id)).await.expect("no panic") {
                Ok(slot) => {
                    place.keep();
                    (Arc::new(Mutex::new(slot)), true)
                }
                Err(r) => return r.into_response(),
            }
        }
    };
    let shared = s.clone();
    let reply = on_slot(slot.clone(), move |slot| {
        let reply = slot.reset(&shared.served, &args);
        (reply, slot.episode_id.clone())
    })
    .await;
    let (reply, id) = reply;
    let mut episodes = s.episodes.lock().expect("not poisoned");
    if new && reply.is_err() {
        // Never started: nothing to continue, so nothing kept.
        s.live.fetch_sub(1, Ordering::SeqCst);
        drop(episodes);
        tokio::task::spawn_blocking(move || drop(slot));
    } else if new {
        let episode = Episode { slot, last: Arc::new(Mutex::new(Instant::now())), owner: client };
        if let Some(replaced) = episodes.insert(id, episode) {
            drop(replaced);
            s.live.fetch_sub(1, Ordering::SeqCst);
        }
    } else if let Some(e) = episodes.get(&id) {
        *e.last.lock().expect("not poisoned") = Instant::now();
    }
    match reply {
        Ok(v) => Json(v).into_response(),
        Err(r) => r.into_response(),
    }
}

async fn step(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: axum::extract::Request,
) -> Response {
    let body = match object_body(&s, request).await {
        Ok(b) => b,
        Err(r) => return r.into_response(),
    };
    if let Some(key) = body.keys().find(|k| !["action", "episode_id", "timeout_s", "request_id"].contains(&k.as_str()))
    {
        return Refusal::invalid(format!(
            "/step has no field {key:?}: it takes action, episode_id, timeout_s and request_id"
        ))
        .into_response();
    }
    let Some(action) = body.get("action").cloned() else {
        return Refusal::invalid("/step needs an action: {\"action\": {\"answer\": TEXT}, \"episode_id\": ID}")
            .into_response();
    };
    let (slot, last) = match episode_of(&s, body.get("episode_id"), "/step", peer.ip()) {
        Ok(e) => e,
        Err(r) => return r.into_response(),
    };
    let shared = s.clone();
    let reply = on_slot(slot, move |slot| slot.step(&shared.served, &action)).await;
    *last.lock().expect("not poisoned") = Instant::now();
    match reply {
        Ok(v) => Json(v).into_response(),
        Err(r) => r.into_response(),
    }
}

async fn state(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let id = q.get("episode_id").map(|v| Value::String(v.clone()));
    let (slot, _) = match episode_of(&s, id.as_ref(), "/state", peer.ip()) {
        Ok(e) => e,
        Err(r) => return r.into_response(),
    };
    match on_slot(slot, Slot::state).await {
        Ok(v) => Json(v).into_response(),
        Err(r) => r.into_response(),
    }
}
