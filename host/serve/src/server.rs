//! The HTTP side: routes, bodies and answers in OpenAI's shape, the accept loop; and, for a
//! training run, each recorded episode's own routes (`/v1/episodes/<id>/…`).

use crate::episodes::{Denied, EpisodeBook, Reported};
use crate::forward::Forward;
use crate::request::{ImageLimits, PixelBudget, job};
use crate::stream;
use crate::tokens::TokenText;
use crate::worker::{Answer, Counters, Job, Replier, Worker};
use anyhow::{Context, Result};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use vagen_model::{FinishReason, Model, ToolCall, ToolFormat};
use vagen_policy::openai::{
    AssistantMessage, ChatRequest, ChatResponse, Choice, ChoiceLogprobs, ErrorBody, ErrorDetail, FunctionCall,
    TokenLogprob, ToolCallEntry, TopLogprob, Usage,
};

/// What a server takes, in its users' units.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// The served models' ids by engine adapter index: the base's, then each served
    /// adapter's.
    pub names: Vec<String>,
    /// Completions decoded together at most.
    pub max_batch: NonZeroUsize,
    /// How long a request reaching an idle server waits for others to share its prefill.
    pub batch_wait: Duration,
    /// Bytes a request body may have.
    pub max_body: usize,
    pub images: ImageLimits,
    /// Pixels of decoded pictures all requests hold at once.
    pub max_server_pixels: u64,
    /// Completions waiting or being generated at most.
    pub max_queue: NonZeroUsize,
    /// Time a client has to send a request's headers, and again its body.
    pub read_timeout: Duration,
    /// The engine's key-value cache.
    pub kv_cache_mib: NonZeroUsize,
    /// Give the heap a generation freed back to the system each time the engine empties
    /// (a server of large pictures; a few milliseconds each time).
    pub trim_memory: bool,
}

pub(crate) struct Shared {
    /// The served models' ids by engine adapter index: the base's, then each `--lora`'s.
    names: Vec<String>,
    max_body: usize,
    pub max_batch: usize,
    pub images: ImageLimits,
    pub pixels: Arc<PixelBudget>,
    max_queue: usize,
    read_timeout: Duration,
    /// Completions waiting or being generated now.
    queued: Arc<AtomicUsize>,
    jobs: mpsc::Sender<Job>,
    pub has_vision: bool,
    /// How the model writes tool calls (`None`: its template writes none).
    pub tool_format: Option<ToolFormat>,
    pub counters: Arc<Counters>,
    /// A training run's recorded episodes (`None` for `vagen-host serve`).
    episodes: Option<Arc<EpisodeBook>>,
    /// Where episodes' calls are sent instead of the worker ([`crate::forward_episodes`]).
    forward: Option<Arc<Forward>>,
}

impl Shared {
    /// A server's state with `o`'s limits, serving `names`, taking no tools and no images
    /// until told, answering nothing elsewhere.
    fn new(
        o: &ServerOptions,
        names: Vec<String>,
        jobs: mpsc::Sender<Job>,
        counters: Arc<Counters>,
        episodes: Option<Arc<EpisodeBook>>,
    ) -> Self {
        Shared {
            names,
            max_body: o.max_body,
            max_batch: o.max_batch.get(),
            images: o.images,
            pixels: PixelBudget::new(o.max_server_pixels),
            max_queue: o.max_queue.get(),
            read_timeout: o.read_timeout,
            queued: Arc::new(AtomicUsize::new(0)),
            jobs,
            has_vision: false,
            tool_format: None,
            counters,
            episodes,
            forward: None,
        }
    }
}

/// A server of `model`: its routes, and the [`Worker`] that answers them, to run on the
/// thread that may use the model. With `episodes`, each open episode of the book has its
/// own routes under `/v1/episodes/<id>/`.
pub fn server(model: &Model, o: &ServerOptions, episodes: Option<Arc<EpisodeBook>>) -> (Router, Worker) {
    let (jobs, queue) = mpsc::channel::<Job>();
    let counters = Arc::new(Counters::default());
    let worker = Worker {
        queue,
        max_batch: o.max_batch,
        wait: o.batch_wait,
        kv_cache_mib: o.kv_cache_mib,
        trim_memory: o.trim_memory,
        counters: counters.clone(),
        episodes: episodes.clone(),
    };
    let mut shared = Shared::new(o, o.names.clone(), jobs, counters, episodes.clone());
    shared.has_vision = model.vision.is_some();
    shared.tool_format = model.chat_template().ok().and_then(ToolFormat::of);
    let shared = Arc::new(shared);
    let mut app = Router::new()
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(one_model))
        .route("/v1/chat/completions", post(chat))
        .route("/stats", get(stats));
    if episodes.is_some() {
        app = episode_routes(app);
    }
    (app.fallback(unknown_route).method_not_allowed_fallback(wrong_method).with_state(shared), worker)
}

fn episode_routes(app: Router<Arc<Shared>>) -> Router<Arc<Shared>> {
    app.route("/v1/episodes/{episode}/chat/completions", post(episode_chat))
        .route("/v1/episodes/{episode}/models", get(episode_models))
        .route("/v1/episodes/{episode}/reward", post(episode_reward))
}

/// The episode routes of `book` alone, their calls sent on to `forward`: no model here.
pub(crate) fn forwarding_server(o: &ServerOptions, book: Arc<EpisodeBook>, forward: Arc<Forward>) -> Router {
    // No worker: nothing is ever queued (the receiver is dropped at once).
    let (jobs, _) = mpsc::channel::<Job>();
    let mut shared = Shared::new(o, vec![forward.model.clone()], jobs, Arc::default(), Some(book));
    shared.forward = Some(forward);
    let shared = Arc::new(shared);
    let app = episode_routes(Router::new());
    app.fallback(unknown_route).method_not_allowed_fallback(wrong_method).with_state(shared)
}

/// Listens on `host:port` (0: a free port), prints the address on stdout's first line (tests
/// and scripts read it), then serves with [`accept`].
pub async fn listen(
    host: &str,
    port: u16,
    app: Router,
    max_connections: usize,
    header_timeout: Duration,
) -> Result<()> {
    let listener =
        tokio::net::TcpListener::bind((host, port)).await.with_context(|| format!("listening on {host}:{port}"))?;
    println!("listening on http://{}", listener.local_addr()?);
    use std::io::Write;
    std::io::stdout().flush()?;
    accept(listener, app, max_connections, header_timeout).await
}

/// Serves each connection on its own task, at most `max_connections` at once (one past it
/// is closed at once), each given `header_timeout` to send a request's headers (hyper's
/// timer; axum's own `serve` sets none, so a client trickling header lines held its
/// connection forever).
pub async fn accept(
    listener: tokio::net::TcpListener,
    app: Router,
    max_connections: usize,
    header_timeout: Duration,
) -> Result<()> {
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    let open = Arc::new(tokio::sync::Semaphore::new(max_connections));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(s) => s,
            // Out of descriptors or a connection reset before it was accepted: the next.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            drop(stream);
            continue;
        };
        // The peer's address, for handlers that ask (`ConnectInfo`: serve-env's episodes).
        let app = app.clone().layer(axum::Extension(axum::extract::ConnectInfo(peer)));
        let service = hyper_util::service::TowerToHyperService::new(app);
        tokio::spawn(async move {
            let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            builder.http1().timer(TokioTimer::new()).header_read_timeout(header_timeout);
            // With upgrades: serve-env's WebSocket sessions start as an HTTP upgrade.
            let _ = builder.serve_connection_with_upgrades(TokioIo::new(stream), service).await;
            drop(permit);
        });
    }
}

/// An error in OpenAI's shape; `param` names the request field at fault.
pub(crate) fn error_with(
    status: StatusCode,
    message: impl Into<String>,
    param: Option<&str>,
    code: Option<&str>,
) -> Response {
    let kind = match status {
        StatusCode::BAD_REQUEST
        | StatusCode::NOT_FOUND
        | StatusCode::METHOD_NOT_ALLOWED
        | StatusCode::PAYLOAD_TOO_LARGE => "invalid_request_error",
        StatusCode::SERVICE_UNAVAILABLE => "overloaded_error",
        StatusCode::REQUEST_TIMEOUT => "timeout_error",
        _ => "server_error",
    };
    let detail = ErrorDetail {
        message: message.into(),
        kind: kind.into(),
        param: param.map(str::to_string),
        code: code.map(str::to_string),
    };
    (status, Json(ErrorBody { error: detail })).into_response()
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    error_with(status, message, None, None)
}

pub(crate) fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Fresh draws for an unseeded request: std's randomly keyed hasher (a new key per call).
pub fn fresh_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new().build_hasher().finish()
}

fn model_object(id: &str) -> Value {
    json!({ "id": id, "object": "model", "created": 0, "owned_by": "vagen" })
}

async fn models(State(s): State<Arc<Shared>>) -> Json<Value> {
    let data: Vec<Value> = s.names.iter().map(|id| model_object(id)).collect();
    Json(json!({ "object": "list", "data": data }))
}

/// `GET /v1/models/{id}` (the client's `models.retrieve`).
async fn one_model(State(s): State<Arc<Shared>>, axum::extract::Path(id): axum::extract::Path<String>) -> Response {
    if s.names.contains(&id) {
        return Json(model_object(&id)).into_response();
    }
    let message = format!("The model {id:?} does not exist (served: {})", s.names.join(", "));
    error_with(StatusCode::NOT_FOUND, message, Some("model"), Some("model_not_found"))
}

/// A route this server does not have (`/v1/completions`, `/v1/embeddings`, …), answered as
/// OpenAI answers one: a 404 with an error object, not an empty body.
async fn unknown_route(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    let message = format!(
        "Unknown request URL: {method} {}. This server has GET /v1/models, GET /v1/models/{{id}} and POST \
         /v1/chat/completions.",
        uri.path()
    );
    error_with(StatusCode::NOT_FOUND, message, None, Some("unknown_url"))
}

async fn wrong_method(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    let message = format!("{method} is not allowed on {}", uri.path());
    error_with(StatusCode::METHOD_NOT_ALLOWED, message, None, Some("method_not_allowed"))
}

/// The adapter a request's `model` names: 0 for the base (or no name), else the adapter's
/// index; `None` for a name nothing here serves.
fn adapter_of(s: &Shared, model: Option<&str>) -> Option<usize> {
    match model {
        None => Some(0),
        Some(name) => s.names.iter().position(|n| n == name),
    }
}

async fn stats(State(s): State<Arc<Shared>>) -> Json<Value> {
    let c = &s.counters;
    Json(json!({
        "requests": c.requests.load(Ordering::SeqCst),
        "rounds": c.rounds.load(Ordering::SeqCst),
        "steps": c.steps.load(Ordering::SeqCst),
        "peak_batch": c.peak_batch.load(Ordering::SeqCst),
        "max_steps_to_first_token": c.max_steps_to_first_token.load(Ordering::SeqCst),
    }))
}

/// A request in the server: its completions counted in the queue until it is answered or
/// its client leaves, and then marked gone (rows still running stop).
struct Pending {
    count: Arc<AtomicUsize>,
    n: usize,
    gone: Arc<AtomicBool>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.count.fetch_sub(self.n, Ordering::SeqCst);
        self.gone.store(true, Ordering::SeqCst);
    }
}

/// The body, at most `limit` bytes. A larger one is read on and dropped up to `drain`
/// bytes, so its client, still sending, reads the 413 instead of a reset connection; past
/// that the connection is given up.
pub async fn read_body(body: axum::body::Body, limit: usize, drain: usize) -> Result<Vec<u8>, ()> {
    use futures_util::StreamExt;
    let mut stream = body.into_data_stream();
    let (mut bytes, mut seen) = (vec![], 0usize);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|_| ())?;
        seen += chunk.len();
        if seen <= limit {
            bytes.extend_from_slice(&chunk);
        } else if seen > drain {
            return Err(());
        }
    }
    if seen > limit { Err(()) } else { Ok(bytes) }
}

async fn chat(State(s): State<Arc<Shared>>, request: axum::extract::Request) -> Response {
    answer(&s, request, None).await
}

/// A chat request, answered by the model or (with `episode`) as that recorded episode's
/// next call, which ignores `model` (the run's policy answers) and samples as the run does.
async fn answer(s: &Shared, request: axum::extract::Request, episode: Option<String>) -> Response {
    let r = match read_request(s, request).await {
        Ok(r) => r,
        Err(response) => return response,
    };
    let adapter = match &episode {
        Some(_) => Some(0),
        None => adapter_of(s, r.model.as_deref()),
    };
    let Some(adapter) = adapter else {
        let message =
            format!("model {:?}: not served here (served: {})", r.model.unwrap_or_default(), s.names.join(", "));
        return error_with(StatusCode::NOT_FOUND, message, Some("model"), Some("model_not_found"));
    };
    let model = s.names[adapter].clone();
    let streamed = r.stream == Some(true);
    let (reply, whole, events) = if streamed {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (Replier::Stream(tx), None, Some(rx))
    } else {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (Replier::Whole(tx), Some(rx), None)
    };
    let made = job(&r, s, adapter, reply).and_then(|mut j| {
        if let Some(id) = episode {
            let book = s.episodes.as_deref().expect("episode routes exist with a book");
            crate::request::into_episode(&mut j, book, id)?;
        }
        Ok(j)
    });
    let job = match made {
        Ok(j) => j,
        Err(e) if e.status == StatusCode::SERVICE_UNAVAILABLE => {
            let mut response = error_with(e.status, e.message, Some(e.param), Some("busy"));
            response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
            return response;
        }
        Err(e) => return error_with(e.status, e.message, Some(e.param), None),
    };
    let n = job.seeds.len();
    if let Some(refusal) = enqueue(s, n) {
        return refusal;
    }
    let pending = Pending { count: s.queued.clone(), n, gone: job.gone.clone() };
    s.counters.requests.fetch_add(1, Ordering::SeqCst);
    if s.jobs.send(job).is_err() {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "the generation thread has stopped");
    }
    let id = format!("chatcmpl-{:x}", fresh_seed());
    let logprobs = r.logprobs == Some(true);
    if let Some(events) = events {
        let include_usage = r.stream_options.and_then(|o| o.include_usage) == Some(true);
        let frame = stream::Frame { id, model, choices: n, logprobs, include_usage };
        return stream::body(frame, events, pending);
    }
    let answer = whole.expect("a whole answer is awaited");
    let answers = match answer.await {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => return error_with(StatusCode::BAD_REQUEST, e, Some("messages"), None),
        Err(_) => return error(StatusCode::INTERNAL_SERVER_ERROR, "the generation thread dropped the request"),
    };
    drop(pending);
    Json(completion(id, model, answers, logprobs)).into_response()
}

/// The bearer key of a request (`Authorization: Bearer …`, as the `openai` clients send
/// their `api_key`).
fn bearer(request: &axum::extract::Request) -> Option<&str> {
    let value = request.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    value.strip_prefix("Bearer ").map(str::trim)
}

/// The refusal of an episode route.
fn denied(d: Denied) -> Response {
    match d {
        Denied::Key => error_with(
            StatusCode::UNAUTHORIZED,
            "no open episode takes this key here (each episode's URL takes its own key, until the episode ends)",
            None,
            Some("invalid_api_key"),
        ),
        Denied::Reported => {
            error_with(StatusCode::CONFLICT, "this episode's reward was already reported", None, Some("reported"))
        }
        Denied::Bad(message) => error_with(StatusCode::BAD_REQUEST, message, Some("body"), None),
    }
}

/// The refusal of a request to `episode` whose key is not that episode's.
fn refusal(s: &Shared, episode: &str, request: &axum::extract::Request) -> Option<Response> {
    let book = s.episodes.as_deref().expect("episode routes exist with a book");
    book.authorize(episode, bearer(request)).err().map(denied)
}

async fn episode_chat(
    State(s): State<Arc<Shared>>,
    axum::extract::Path(episode): axum::extract::Path<String>,
    request: axum::extract::Request,
) -> Response {
    if let Some(refused) = refusal(&s, &episode, &request) {
        return refused;
    }
    if let Some(f) = &s.forward {
        let book = s.episodes.as_deref().expect("episode routes exist with a book");
        return match read_request(&s, request).await {
            Ok(r) => crate::forward::forward_call(book, f, &episode, r).await,
            Err(response) => response,
        };
    }
    answer(&s, request, Some(episode)).await
}

/// `GET …/models` of an episode: the one model that answers it.
async fn episode_models(
    State(s): State<Arc<Shared>>,
    axum::extract::Path(episode): axum::extract::Path<String>,
    request: axum::extract::Request,
) -> Response {
    if let Some(refused) = refusal(&s, &episode, &request) {
        return refused;
    }
    Json(json!({ "object": "list", "data": [model_object(&s.names[0])] })).into_response()
}

/// `POST …/reward`: the episode's reward (a [`Reported`]), once.
async fn episode_reward(
    State(s): State<Arc<Shared>>,
    axum::extract::Path(episode): axum::extract::Path<String>,
    request: axum::extract::Request,
) -> Response {
    if let Some(refused) = refusal(&s, &episode, &request) {
        return refused;
    }
    let bytes = match tokio::time::timeout(s.read_timeout, read_body(request.into_body(), 1 << 20, 1 << 22)).await {
        Ok(Ok(b)) => b,
        _ => return error_with(StatusCode::PAYLOAD_TOO_LARGE, "a reward body is at most 1 MiB", None, None),
    };
    let reported: Reported = match serde_json::from_slice(&bytes) {
        Ok(r) => r,
        Err(e) => {
            let message = format!(
                "expected {{\"reward\": number, \"success\"?: bool, \"call_rewards\"?: [number], \"metrics\"?: {{name: number}}}}: {e}"
            );
            return error_with(StatusCode::BAD_REQUEST, message, Some("body"), None);
        }
    };
    let book = s.episodes.as_deref().expect("episode routes exist with a book");
    match book.report(&episode, reported) {
        Ok(()) => Json(json!({ "ok": true })).into_response(),
        Err(d) => denied(d),
    }
}

/// The request's body as a chat-completions request, or the error that answers it: 408
/// when it did not arrive within `--read-timeout-s`, 413 past `--max-body-mib`, 400 when
/// it is not a chat-completions request.
async fn read_request(s: &Shared, request: axum::extract::Request) -> Result<ChatRequest, Response> {
    let read =
        tokio::time::timeout(s.read_timeout, read_body(request.into_body(), s.max_body, s.max_body.saturating_mul(4)))
            .await;
    let bytes = match read {
        Ok(Ok(b)) => b,
        Err(_) => {
            let message = format!("the body did not arrive within {} s", s.read_timeout.as_secs());
            return Err(error_with(StatusCode::REQUEST_TIMEOUT, message, None, Some("body_timeout")));
        }
        Ok(Err(_)) => {
            let message = format!("the body is larger than {} MiB (--max-body-mib)", s.max_body >> 20);
            return Err(error_with(StatusCode::PAYLOAD_TOO_LARGE, message, None, Some("body_too_large")));
        }
    };
    serde_json::from_slice(&bytes).map_err(|e| {
        let message = format!("the body is not a chat-completions request: {e}");
        error_with(StatusCode::BAD_REQUEST, message, Some("body"), None)
    })
}

/// Counts `n` more completions into the queue; when that would pass `--max-queue`, counts
/// nothing and returns the answer instead: 503 with `Retry-After`.
fn enqueue(s: &Shared, n: usize) -> Option<Response> {
    if s.queued.fetch_add(n, Ordering::SeqCst) + n <= s.max_queue {
        return None;
    }
    s.queued.fetch_sub(n, Ordering::SeqCst);
    let message = format!("{} completions are queued (--max-queue): try again shortly", s.max_queue);
    let mut response = error_with(StatusCode::SERVICE_UNAVAILABLE, message, None, Some("queue_full"));
    response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    Some(response)
}

/// The whole (not streamed) response: a choice per answer, with its log-probs when asked,
/// and the usage counted over them all.
fn completion(id: String, model: String, answers: Vec<Answer>, logprobs: bool) -> ChatResponse {
    let prompt_tokens = answers.first().map_or(0, |a| a.prompt_tokens);
    let completion_tokens = answers.iter().map(|a| a.token_ids.len()).sum::<usize>();
    let choices = answers
        .into_iter()
        .enumerate()
        .map(|(index, a)| Choice {
            index,
            message: AssistantMessage {
                role: "assistant".into(),
                // OpenAI's answer of calls alone has no content.
                content: (a.calls.is_empty() || !a.text.is_empty()).then(|| a.text.clone()),
                tool_calls: (!a.calls.is_empty()).then(|| a.calls.iter().map(tool_call_entry).collect()),
            },
            finish_reason: Some(finish_reason(a.finish, a.ends_in_calls).into()),
            logprobs: logprobs.then(|| token_logprobs(&a)),
            token_ids: Some(a.token_ids),
            partial_bytes: a.partial,
        })
        .collect();
    let usage = Usage { prompt_tokens, completion_tokens, total_tokens: prompt_tokens + completion_tokens };
    ChatResponse { id, object: "chat.completion".into(), created: now(), model, choices, usage: Some(usage) }
}

/// OpenAI's name for why an answer ended (`calls`: it ends as `tool_calls`).
pub(crate) fn finish_reason(f: FinishReason, calls: bool) -> &'static str {
    match f {
        _ if calls => "tool_calls",
        FinishReason::Length => "length",
        // A cancelled answer has no client left to read it.
        FinishReason::Eos | FinishReason::Stop | FinishReason::Cancelled => "stop",
    }
}

fn tool_call_entry(c: &ToolCall) -> ToolCallEntry {
    let function = FunctionCall { name: c.name.clone(), arguments: c.arguments.clone() };
    ToolCallEntry { id: c.id.clone(), kind: "function".into(), function }
}

/// An answer's tokens with their log-probs and alternatives.
fn token_logprobs(a: &Answer) -> ChoiceLogprobs {
    let content = (0..a.token_ids.len()).map(|i| logprob_entry(&a.tokens[i], a.logprobs[i], a.top.get(i))).collect();
    ChoiceLogprobs { content }
}

/// One token's `logprobs` entry: its text and raw bytes (part of a character for some
/// tokens), and its alternatives'.
pub(crate) fn logprob_entry(token: &TokenText, logprob: f32, top: Option<&Vec<(TokenText, f32)>>) -> TokenLogprob {
    let top_logprobs = top
        .into_iter()
        .flatten()
        .map(|(t, l)| TopLogprob { token: t.text.clone(), logprob: *l, bytes: t.bytes.clone() })
        .collect();
    TokenLogprob { token: token.text.clone(), logprob, bytes: token.bytes.clone(), top_logprobs }
}
