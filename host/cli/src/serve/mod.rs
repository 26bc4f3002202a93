//! `vagen-host serve`: an OpenAI-compatible server of our own engine (`/v1/models`,
//! `/v1/chat/completions` with and without streaming). A worker thread owns the model and
//! drives the engine's step loop: requests arriving while others generate join the running
//! batch at the next step (up to `--max-batch` rows; past it they wait for rows to end),
//! and an idle server gathers what arrives within `--batch-wait-ms` of the first request
//! into one prefill.
//!
//! OpenAI's semantics: draws are fresh per request unless `seed` is given (choice i of a
//! seeded request draws with `seed + i`, so `n = 4` equals four single requests seeded
//! `seed` … `seed + 3`); `n` completions share the prompt's prefill (the engine's prefix
//! sharing); `logprobs` are the sampled tokens' under the temperature-scaled distribution
//! they were drawn from; every choice carries its `token_ids` (our extension). Fields we do
//! not implement (`functions`, JSON `response_format`, …) are refused by name, never ignored;
//! tools are offered through the model's chat template and its calls read back (`tools.rs`);
//! every error, on every route (404, 405 and 413 included), has OpenAI's JSON shape. Bodies come typed
//! (`vagen_policy::openai`, shared with the judge's client).

mod request;
mod stream;
mod tokens;
mod tools;

use crate::model_args::ModelArgs;
use anyhow::{Context, Result};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Args;
use request::{ImageLimits, PixelBudget, PixelHold, job};
use serde_json::{Value, json};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokens::{TokenText, answer_text, token_text};
use vagen_model::{
    Chat, ChatAnswer, ChatError, Engine, EngineOptions, FinishReason, GenerateOptions, Image, Message, Model,
    RequestId, StepOutput, Tokenizer, ToolCall, ToolFormat,
};
use vagen_policy::openai::{
    AssistantMessage, ChatRequest, ChatResponse, Choice, ChoiceLogprobs, ErrorBody, ErrorDetail, FunctionCall,
    TokenLogprob, ToolCallEntry, TopLogprob, Usage,
};

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// 0 picks a free port; the address is printed on the first line of stdout.
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// Completions decoded together at most; more wait and join as rows end.
    #[arg(long, default_value = "64")]
    max_batch: NonZeroUsize,
    /// How long a request reaching an idle server waits for others to share its first
    /// prefill (ms); a busy server takes requests in at its next step regardless.
    #[arg(long, default_value_t = 5)]
    batch_wait_ms: u64,
    /// The model's id in `/v1/models` and responses (default: `--model`'s value).
    #[arg(long)]
    served_name: Option<String>,
    /// A LoRA adapter folder (PEFT's layout) served as model NAME (repeatable): a request's
    /// `model` picks an adapter or the base, and requests for different ones share a batch.
    #[arg(long = "lora", value_name = "NAME=DIR", value_parser = parse_lora)]
    lora: Vec<(String, std::path::PathBuf)>,
    /// Request bodies larger than this are refused (413) before they are read whole (MiB).
    #[arg(long, default_value = "16")]
    max_body_mib: NonZeroUsize,
    /// Pixels an image may have, read from its header before it is decoded (a small file
    /// can decode to gigabytes).
    #[arg(long, default_value = "16777216")]
    max_image_pixels: u64,
    /// Images one request may hold, counted before any is read.
    #[arg(long, default_value = "8")]
    max_images: usize,
    /// Pixels of all of a request's images together, from their headers before decoding
    /// (each decodes to 3 bytes a pixel, and the tower's work grows with them).
    #[arg(long, default_value = "33554432")]
    max_request_pixels: u64,
    /// Pixels of decoded pictures all requests in the server hold at once; a request past
    /// it is answered 503 with `Retry-After` (default: four requests' worth).
    #[arg(long, default_value = "134217728")]
    max_server_pixels: u64,
    /// Completions waiting or being generated at most; past it a request is answered 503
    /// with `Retry-After` instead of queueing without bound.
    #[arg(long, default_value = "256")]
    max_queue: NonZeroUsize,
    /// Open connections at most; past it a new connection is closed at once.
    #[arg(long, default_value = "256")]
    max_connections: NonZeroUsize,
    /// Seconds a client has to send a request's headers, and again its body; a slower one
    /// is disconnected (headers) or answered 408 (body).
    #[arg(long, default_value_t = 10)]
    read_timeout_s: u64,
}

fn parse_lora(s: &str) -> Result<(String, std::path::PathBuf), String> {
    match s.split_once('=') {
        Some((name, dir)) if !name.is_empty() && !dir.is_empty() => Ok((name.to_string(), dir.into())),
        _ => Err(format!("{s:?}: expected NAME=DIR")),
    }
}

/// One request's completions to generate: one per seed.
struct Job {
    messages: Vec<Message>,
    images: Vec<Image>,
    max_tokens: usize,
    temperature: f64,
    top_p: f64,
    stop: Vec<String>,
    seeds: Vec<u64>,
    /// Alternatives per position to return (`top_logprobs`).
    top_logprobs: usize,
    tools: tools::ToolUse,
    /// The served adapter (0: the base).
    adapter: usize,
    reply: Replier,
    /// Set when the client left: its rows stop at the next decode step.
    gone: Arc<AtomicBool>,
    /// The pictures' share of the server's pixel budget, held until the job is done.
    pixels: Option<PixelHold>,
    /// The worker's step count when the request was queued.
    arrived: usize,
}

/// Where a job's answer goes: whole, or token by token.
enum Replier {
    Whole(tokio::sync::oneshot::Sender<Reply>),
    Stream(tokio::sync::mpsc::UnboundedSender<stream::Event>),
}

/// A request's completions, or why there are none.
type Reply = Result<Vec<Answer>, String>;

/// One completion.
struct Answer {
    /// Its text (before its tool calls, when it has any).
    text: String,
    calls: Vec<ToolCall>,
    /// It ends as `tool_calls` ([`tools::ToolUse::ends_in_calls`]).
    ends_in_calls: bool,
    finish: FinishReason,
    prompt_tokens: usize,
    token_ids: Vec<u32>,
    /// Each sampled token's text and bytes, for `logprobs`.
    tokens: Vec<TokenText>,
    logprobs: Vec<f32>,
    /// At each position, the `top_logprobs` most likely tokens and their log-probs.
    top: Vec<Vec<(TokenText, f32)>>,
    /// The bytes of a character the answer was cut inside (`text` leaves them out).
    partial: Option<Vec<u8>>,
}

struct Shared {
    /// The served models' ids by engine adapter index: the base's, then each `--lora`'s.
    names: Vec<String>,
    max_body: usize,
    max_batch: usize,
    images: ImageLimits,
    pixels: Arc<PixelBudget>,
    max_queue: usize,
    read_timeout: Duration,
    /// Completions waiting or being generated now.
    queued: Arc<AtomicUsize>,
    jobs: mpsc::Sender<Job>,
    has_vision: bool,
    /// How the model writes tool calls (`None`: its template writes none).
    tool_format: Option<ToolFormat>,
    counters: Arc<Counters>,
}

/// What `/stats` reports, kept by the worker as it steps.
#[derive(Default)]
struct Counters {
    requests: AtomicUsize,
    /// Times the engine started from idle.
    rounds: AtomicUsize,
    /// Engine steps run.
    steps: AtomicUsize,
    /// Rows decoded together at most.
    peak_batch: AtomicUsize,
    /// The most steps any request waited from being queued to its first token (the step
    /// that sampled it included).
    max_steps_to_first_token: AtomicUsize,
}

pub fn serve(a: ServeArgs) -> Result<()> {
    let mut model = a.model.load()?;
    let mut names = vec![a.served_name.clone().unwrap_or_else(|| a.model.model.to_string())];
    for (adapter, dir) in &a.lora {
        if names.contains(adapter) {
            anyhow::bail!("--lora {adapter}={}: the name {adapter:?} is taken", dir.display());
        }
        let index = model.add_served_adapter(dir).with_context(|| format!("--lora {adapter}={}", dir.display()))?;
        debug_assert_eq!(index, names.len(), "served adapters are numbered from 1 in order");
        names.push(adapter.clone());
    }
    let has_vision = model.vision.is_some();
    let tool_format = model.chat_template().ok().and_then(ToolFormat::of);
    let (jobs, queue) = mpsc::channel::<Job>();
    let counters = Arc::new(Counters::default());
    let worker = Worker {
        model,
        engine: Engine::new(EngineOptions {
            max_batch: a.max_batch,
            kv_cache_mib: NonZeroUsize::new(1024).expect("positive"),
            ..Default::default()
        }),
        max_batch: a.max_batch.get(),
        wait: Duration::from_millis(a.batch_wait_ms),
        counters: counters.clone(),
        jobs: std::collections::HashMap::new(),
        rows: std::collections::HashMap::new(),
        next_job: 0,
        next_key: 0,
    };
    std::thread::Builder::new().name("generation".into()).spawn(move || worker.run(queue))?;
    let max_body = a.max_body_mib.get() << 20;
    let shared = Arc::new(Shared {
        names,
        max_body,
        max_batch: a.max_batch.get(),
        images: ImageLimits {
            per_request: a.max_images,
            pixels_per_image: a.max_image_pixels,
            pixels_per_request: a.max_request_pixels,
        },
        pixels: PixelBudget::new(a.max_server_pixels),
        max_queue: a.max_queue.get(),
        read_timeout: Duration::from_secs(a.read_timeout_s),
        queued: Arc::new(AtomicUsize::new(0)),
        jobs,
        has_vision,
        tool_format,
        counters,
    });
    let app = Router::new()
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(one_model))
        .route("/v1/chat/completions", post(chat))
        .route("/stats", get(stats))
        .fallback(unknown_route)
        .method_not_allowed_fallback(wrong_method)
        .with_state(shared);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        listen(&a.host, a.port, app, a.max_connections.get(), Duration::from_secs(a.read_timeout_s)).await
    })
}

/// Listens on `host:port` (0: a free port), prints the address on stdout's first line (tests
/// and scripts read it), then serves with [`accept`].
pub(crate) async fn listen(
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
async fn accept(
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

/// Owns the model and the engine: takes jobs in between engine steps, streams each token as
/// it is sampled, and answers a job once all its choices ended.
struct Worker {
    model: Model,
    engine: Engine,
    max_batch: usize,
    wait: Duration,
    counters: Arc<Counters>,
    /// Jobs being answered, by number.
    jobs: std::collections::HashMap<u64, InFlight>,
    /// The job and choice of each engine request.
    rows: std::collections::HashMap<RequestId, (u64, usize)>,
    next_job: u64,
    /// Engine request keys: every completion a trajectory of its own.
    next_key: u64,
}

/// A job and its choices' state.
struct InFlight {
    job: Job,
    routes: Vec<stream::Route>,
    /// Each choice's engine request while it runs.
    ids: Vec<Option<RequestId>>,
    answers: Vec<Option<Result<ChatAnswer, ChatError>>>,
    prompt_tokens: Vec<usize>,
    first_token_seen: bool,
}

impl Worker {
    fn run(mut self, queue: mpsc::Receiver<Job>) {
        loop {
            if self.engine.pending() == 0 {
                self.engine.clear();
                give_back_memory();
                let Ok(first) = queue.recv() else { return };
                self.counters.rounds.fetch_add(1, Ordering::SeqCst);
                let mut completions = first.seeds.len();
                self.take(first);
                let until = Instant::now() + self.wait;
                while completions < self.max_batch {
                    match queue.recv_timeout(until.saturating_duration_since(Instant::now())) {
                        Ok(job) => {
                            completions += job.seeds.len();
                            self.take(job);
                        }
                        Err(_) => break,
                    }
                }
            } else {
                while let Ok(job) = queue.try_recv() {
                    self.take(job);
                }
            }
            self.abort_gone();
            let stepped = self.engine.step(&self.model);
            let step = self.counters.steps.fetch_add(1, Ordering::SeqCst) + 1;
            let peak = self.engine.stats().peak_batch;
            self.counters.peak_batch.fetch_max(peak, Ordering::SeqCst);
            match stepped {
                Ok(out) => self.deliver(out, step),
                Err(e) => self.fail_all(&e.to_string()),
            }
        }
    }

    /// Submits each of a job's choices to the engine (a choice whose prompt is refused is
    /// answered with the reason).
    fn take(&mut self, job: Job) {
        let number = self.next_job;
        self.next_job += 1;
        let options = GenerateOptions {
            temperature: job.temperature,
            top_p: job.top_p,
            stop: job.stop.clone(),
            top_logprobs: job.top_logprobs,
            max_new_tokens: usize::MAX,
            ..Default::default()
        };
        let n = job.seeds.len();
        let mut flight = InFlight {
            routes: routes_of(&job),
            ids: vec![None; n],
            answers: (0..n).map(|_| None).collect(),
            prompt_tokens: vec![0; n],
            first_token_seen: false,
            job,
        };
        for (choice, chat) in chats_of(&flight.job).iter().enumerate() {
            self.next_key += 1;
            let submitted = self.model.chat_request(chat, self.next_key).and_then(|request| {
                let tokens = request.ids.len();
                let id = self.engine.submit(&self.model, request, &options);
                id.map(|id| (id, tokens)).map_err(|e| ChatError::Prompt(e.to_string()))
            });
            match submitted {
                Ok((id, tokens)) => {
                    flight.ids[choice] = Some(id);
                    flight.prompt_tokens[choice] = tokens;
                    self.rows.insert(id, (number, choice));
                }
                Err(e) => flight.answers[choice] = Some(Err(e)),
            }
        }
        self.jobs.insert(number, flight);
        self.finish_if_done(number);
    }

    /// The rows of clients that left stop (the engine reports them at its next step).
    fn abort_gone(&mut self) {
        for flight in self.jobs.values().filter(|f| f.job.gone.load(Ordering::SeqCst)) {
            for id in flight.ids.iter().flatten() {
                self.engine.abort(*id);
            }
        }
    }

    /// A step's tokens to their streams, its ended requests to their jobs.
    fn deliver(&mut self, out: StepOutput, step: usize) {
        for s in &out.sampled {
            let Some(&(number, choice)) = self.rows.get(&s.id) else { continue };
            let flight = self.jobs.get_mut(&number).expect("a running row's job is held");
            if !std::mem::replace(&mut flight.first_token_seen, true) {
                let waited = step.saturating_sub(flight.job.arrived);
                self.counters.max_steps_to_first_token.fetch_max(waited, Ordering::SeqCst);
            }
            flight.routes[choice].send(&self.model.tokenizer, &self.model.eos_token_ids, s);
        }
        for (id, generation) in out.finished {
            let Some((number, choice)) = self.rows.remove(&id) else { continue };
            let flight = self.jobs.get_mut(&number).expect("a running row's job is held");
            flight.ids[choice] = None;
            let prompt_tokens = flight.prompt_tokens[choice];
            let answer = Ok(ChatAnswer { generation, prompt_tokens });
            if let Replier::Stream(events) = &flight.job.reply {
                let end = stream_end(&self.model.tokenizer, &answer, &flight.routes[choice], &flight.job.tools);
                let _ = events.send(end);
            }
            flight.answers[choice] = Some(answer);
            self.finish_if_done(number);
        }
    }

    /// A failed step failed every request the engine held.
    fn fail_all(&mut self, error: &str) {
        self.rows.clear();
        let numbers: Vec<u64> = self.jobs.keys().copied().collect();
        for number in numbers {
            let flight = self.jobs.get_mut(&number).expect("listed");
            for (answer, id) in flight.answers.iter_mut().zip(&mut flight.ids) {
                if id.take().is_some() {
                    *answer = Some(Err(ChatError::Generation(error.to_string())));
                }
            }
            self.finish_if_done(number);
        }
    }

    /// Answers job `number` once every choice has ended.
    fn finish_if_done(&mut self, number: u64) {
        if self.jobs[&number].answers.iter().any(Option::is_none) {
            return;
        }
        let flight = self.jobs.remove(&number).expect("held");
        // The pictures' share goes back before the answer: a client that asks again at once
        // finds it free.
        drop(flight.job.pixels);
        let answers = flight.answers.into_iter().map(|a| a.expect("every choice ended"));
        match flight.job.reply {
            Replier::Stream(events) => {
                // Ended choices were sent as they ended; what failed is sent now.
                for (a, route) in answers.zip(&flight.routes) {
                    if a.is_err() {
                        let _ = events.send(stream_end(&self.model.tokenizer, &a, route, &flight.job.tools));
                    }
                }
            }
            Replier::Whole(reply) => {
                let (k, tools) = (flight.job.top_logprobs, &flight.job.tools);
                let answer = answers
                    .map(|a| Ok(self.whole_answer(a.map_err(|e| e.to_string())?, k, tools)))
                    .collect::<Result<Vec<_>, String>>();
                let _ = reply.send(answer);
            }
        }
    }

    /// A completion answered whole, with each token's text and its `k` most likely
    /// alternatives (for `logprobs`), its tool calls read as `tools` asks.
    fn whole_answer(&self, a: ChatAnswer, k: usize, tools: &tools::ToolUse) -> Answer {
        let tokenizer = &self.model.tokenizer;
        let tokens = a.generation.token_ids.iter().map(|&t| token_text(tokenizer, t)).collect();
        let top = a
            .generation
            .top
            .iter()
            .map(|at| at.iter().take(k).map(|&(t, l)| (token_text(tokenizer, t), l)).collect())
            .collect();
        let (text, partial) = answer_text(tokenizer, &a.generation);
        let (text, calls) = tools.read(&text);
        Answer {
            ends_in_calls: tools.ends_in_calls(&calls),
            text,
            calls,
            partial,
            finish: a.generation.finish,
            prompt_tokens: a.prompt_tokens,
            token_ids: a.generation.token_ids,
            tokens,
            logprobs: a.generation.logprobs,
            top,
        }
    }
}

/// Returns the heap a generation freed to the system: glibc keeps it in its arenas, so a
/// request of large pictures (gigabytes of pixels and activations) left the server that
/// large for good.
fn give_back_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory at the top of the heaps and arenas.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The chats a job asks for: its conversation once per seed.
fn chats_of(j: &Job) -> Vec<Chat> {
    j.seeds
        .iter()
        .map(|&seed| Chat {
            messages: j.messages.clone(),
            images: j.images.clone(),
            max_tokens: j.max_tokens,
            seed: Some(seed),
            adapter: j.adapter,
            tools: j.tools.tools.clone(),
            answer_prefix: j.tools.prefix.clone(),
        })
        .collect()
}

/// One route per choice: its index, its client's gone flag, and where its tokens stream
/// when they do.
fn routes_of(j: &Job) -> Vec<stream::Route> {
    let events = match &j.reply {
        Replier::Stream(tx) => Some(tx.clone()),
        Replier::Whole(_) => None,
    };
    let hold = j.stop.iter().map(String::len).max().unwrap_or(0);
    let sending = j.tools.streaming();
    (0..j.seeds.len())
        .map(|c| stream::Route::new(c, j.gone.clone(), events.clone(), j.top_logprobs, hold, sending))
        .collect()
}

/// A streamed completion's last event: the text its route has not sent yet, its tool calls
/// and why it ended, or why it failed.
fn stream_end(
    tokenizer: &Tokenizer,
    answer: &Result<ChatAnswer, ChatError>,
    route: &stream::Route,
    tools: &tools::ToolUse,
) -> stream::Event {
    match answer {
        Ok(a) => {
            let (text, partial) = answer_text(tokenizer, &a.generation);
            let (text, calls) = tools.read(&text);
            stream::Event::End {
                choice: route.choice,
                rest: stream::rest_of(&text, route.sent),
                ends_in_calls: tools.ends_in_calls(&calls),
                calls,
                finish: a.generation.finish,
                partial,
                usage: (a.prompt_tokens, a.generation.token_ids.len()),
            }
        }
        Err(e) => stream::Event::Failed(e.to_string()),
    }
}

/// An error in OpenAI's shape; `param` names the request field at fault.
fn error_with(status: StatusCode, message: impl Into<String>, param: Option<&str>, code: Option<&str>) -> Response {
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

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Fresh draws for an unseeded request: std's randomly keyed hasher (a new key per call).
pub(crate) fn fresh_seed() -> u64 {
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
pub(crate) async fn read_body(body: axum::body::Body, limit: usize, drain: usize) -> Result<Vec<u8>, ()> {
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
    let r = match read_request(&s, request).await {
        Ok(r) => r,
        Err(response) => return response,
    };
    let Some(adapter) = adapter_of(&s, r.model.as_deref()) else {
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
    let job = match job(&r, &s, adapter, reply) {
        Ok(j) => j,
        Err(e) if e.status == StatusCode::SERVICE_UNAVAILABLE => {
            let mut response = error_with(e.status, e.message, Some(e.param), Some("busy"));
            response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
            return response;
        }
        Err(e) => return error_with(e.status, e.message, Some(e.param), None),
    };
    let n = job.seeds.len();
    if let Some(refusal) = enqueue(&s, n) {
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
fn finish_reason(f: FinishReason, calls: bool) -> &'static str {
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
fn logprob_entry(token: &TokenText, logprob: f32, top: Option<&Vec<(TokenText, f32)>>) -> TokenLogprob {
    let top_logprobs = top
        .into_iter()
        .flatten()
        .map(|(t, l)| TopLogprob { token: t.text.clone(), logprob: *l, bytes: t.bytes.clone() })
        .collect();
    TokenLogprob { token: token.text.clone(), logprob, bytes: token.bytes.clone(), top_logprobs }
}
