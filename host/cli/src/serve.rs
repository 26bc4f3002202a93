//! `vagen-host serve`: an OpenAI-compatible server of our own engine (`/v1/models`,
//! `/v1/chat/completions` with and without streaming). Requests that arrive together are
//! answered by one generation call: a worker thread owns the model and gathers what waits
//! (up to `--max-batch`, for at most `--batch-wait-ms` after the first).

use crate::model_args::ModelArgs;
use anyhow::{Context, Result};
use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use clap::Args;
use serde_json::{Value, json};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use vagen_model::{Chat, Engine, EngineOptions, FinishReason, GenerateOptions, IMAGE_MARKER, Image, Message, Model};

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// 0 picks a free port; the address is printed on the first line of stdout.
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// Requests answered by one generation call at most.
    #[arg(long, default_value = "64")]
    max_batch: NonZeroUsize,
    /// How long the first waiting request waits for others to join its batch (ms).
    #[arg(long, default_value_t = 5)]
    batch_wait_ms: u64,
    /// The model's id in `/v1/models` and responses (default: `--model`'s value).
    #[arg(long)]
    served_name: Option<String>,
    /// A LoRA adapter folder (PEFT's layout) served as model NAME (repeatable): a request's
    /// `model` picks an adapter or the base, and requests for different ones share a batch.
    #[arg(long = "lora", value_name = "NAME=DIR", value_parser = parse_lora)]
    lora: Vec<(String, std::path::PathBuf)>,
}

fn parse_lora(s: &str) -> Result<(String, std::path::PathBuf), String> {
    match s.split_once('=') {
        Some((name, dir)) if !name.is_empty() && !dir.is_empty() => Ok((name.to_string(), dir.into())),
        _ => Err(format!("{s:?}: expected NAME=DIR")),
    }
}

/// One chat completion to generate.
struct Job {
    messages: Vec<Message>,
    images: Vec<Image>,
    max_tokens: usize,
    temperature: f64,
    top_p: f64,
    stop: Vec<String>,
    seed: Option<u64>,
    /// The served adapter (0: the base).
    adapter: usize,
    reply: tokio::sync::oneshot::Sender<Result<Answer, String>>,
}

struct Answer {
    text: String,
    finish: FinishReason,
    prompt_tokens: usize,
    completion_tokens: usize,
}

struct Shared {
    /// The served models' ids by engine adapter index: the base's, then each `--lora`'s.
    names: Vec<String>,
    jobs: mpsc::Sender<Job>,
    has_vision: bool,
    generations: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
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
    let (jobs, queue) = mpsc::channel::<Job>();
    let generations = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(AtomicUsize::new(0));
    let worker = Worker {
        model,
        engine: Engine::new(EngineOptions {
            max_batch: a.max_batch,
            kv_cache_mib: NonZeroUsize::new(1024).expect("positive"),
            ..Default::default()
        }),
        max_batch: a.max_batch.get(),
        wait: Duration::from_millis(a.batch_wait_ms),
        generations: generations.clone(),
    };
    std::thread::Builder::new().name("generation".into()).spawn(move || worker.run(queue))?;
    let shared = Arc::new(Shared { names, jobs, has_vision, generations, requests });
    let app = Router::new()
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat))
        .route("/stats", get(stats))
        .with_state(shared);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind((a.host.as_str(), a.port))
            .await
            .with_context(|| format!("listening on {}:{}", a.host, a.port))?;
        println!("listening on http://{}", listener.local_addr()?);
        use std::io::Write;
        std::io::stdout().flush()?;
        axum::serve(listener, app).await.context("serving")
    })
}

/// Owns the model: gathers waiting jobs into batches and generates each batch at once.
struct Worker {
    model: Model,
    engine: Engine,
    max_batch: usize,
    wait: Duration,
    generations: Arc<AtomicUsize>,
}

impl Worker {
    fn run(mut self, queue: mpsc::Receiver<Job>) {
        while let Ok(first) = queue.recv() {
            let mut jobs = vec![first];
            let until = Instant::now() + self.wait;
            while jobs.len() < self.max_batch {
                match queue.recv_timeout(until.saturating_duration_since(Instant::now())) {
                    Ok(job) => jobs.push(job),
                    Err(_) => break,
                }
            }
            // One generation per sampling setting (clients of one run share theirs).
            while !jobs.is_empty() {
                let key = |j: &Job| (j.temperature.to_bits(), j.top_p.to_bits(), j.stop.clone());
                let k = key(&jobs[0]);
                let (batch, rest): (Vec<Job>, Vec<Job>) = jobs.into_iter().partition(|j| key(j) == k);
                jobs = rest;
                self.generate(batch);
            }
        }
    }

    fn generate(&mut self, jobs: Vec<Job>) {
        let Some(first) = jobs.first() else { return };
        let options = GenerateOptions {
            temperature: first.temperature,
            top_p: first.top_p,
            stop: first.stop.clone(),
            ..Default::default()
        };
        let (chats, replies): (Vec<Chat>, Vec<_>) = jobs
            .into_iter()
            .map(|j| {
                (
                    Chat {
                        messages: j.messages,
                        images: j.images,
                        max_tokens: j.max_tokens,
                        seed: j.seed,
                        adapter: j.adapter,
                    },
                    j.reply,
                )
            })
            .unzip();
        let answered = self.model.answer_chats(&mut self.engine, &chats, &options);
        if answered.generated > 0 {
            self.generations.fetch_add(1, Ordering::SeqCst);
        }
        for (reply, answer) in replies.into_iter().zip(answered.answers) {
            let answer = answer.map_err(|e| e.to_string()).map(|a| Answer {
                completion_tokens: a.generation.token_ids.len(),
                text: a.generation.text,
                finish: a.generation.finish,
                prompt_tokens: a.prompt_tokens,
            });
            let _ = reply.send(answer);
        }
    }
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let kind = if status == StatusCode::BAD_REQUEST { "invalid_request_error" } else { "server_error" };
    (status, Json(json!({ "error": { "message": message.into(), "type": kind } }))).into_response()
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

async fn models(State(s): State<Arc<Shared>>) -> Json<Value> {
    let data: Vec<Value> =
        s.names.iter().map(|id| json!({ "id": id, "object": "model", "created": 0, "owned_by": "vagen" })).collect();
    Json(json!({ "object": "list", "data": data }))
}

/// The adapter a request's `model` names: 0 for the base (or, with no adapters served, any
/// name), else the adapter's index; `None` for a name nothing here serves.
fn adapter_of(s: &Shared, body: &Value) -> Option<usize> {
    match body["model"].as_str() {
        None => Some(0),
        Some(_) if s.names.len() == 1 => Some(0),
        Some(name) => s.names.iter().position(|n| n == name),
    }
}

async fn stats(State(s): State<Arc<Shared>>) -> Json<Value> {
    Json(json!({
        "generation_calls": s.generations.load(Ordering::SeqCst),
        "requests": s.requests.load(Ordering::SeqCst),
    }))
}

/// The request's messages (text with `<image>` markers) and images, or what is wrong.
fn read_messages(body: &Value, vision: bool) -> Result<(Vec<Message>, Vec<Image>), String> {
    let list = body["messages"].as_array().ok_or("messages must be a list")?;
    if list.is_empty() {
        return Err("messages is empty".into());
    }
    let mut images = vec![];
    let mut out = vec![];
    for (i, m) in list.iter().enumerate() {
        let role = m["role"].as_str().ok_or(format!("messages[{i}].role must be a string"))?;
        let text = match &m["content"] {
            Value::String(s) => s.clone(),
            Value::Array(parts) => {
                let mut text = String::new();
                for (k, p) in parts.iter().enumerate() {
                    match p["type"].as_str() {
                        Some("text") => text.push_str(p["text"].as_str().unwrap_or("")),
                        Some("image_url") => {
                            if !vision {
                                return Err(format!(
                                    "messages[{i}].content[{k}]: this model has no vision tower; send text only"
                                ));
                            }
                            let url = p["image_url"]["url"].as_str().unwrap_or("");
                            images.push(decode_image(url).map_err(|e| format!("messages[{i}].content[{k}]: {e}"))?);
                            text.push_str(IMAGE_MARKER);
                        }
                        other => return Err(format!("messages[{i}].content[{k}]: unsupported part type {other:?}")),
                    }
                }
                text
            }
            Value::Null => String::new(),
            _ => return Err(format!("messages[{i}].content must be a string or a list of parts")),
        };
        out.push(Message::new(role, text));
    }
    Ok((out, images))
}

/// A `data:image/...;base64,` URL as an RGB image (no URL is fetched).
fn decode_image(url: &str) -> Result<Image, String> {
    let data = url
        .strip_prefix("data:")
        .and_then(|r| r.split_once(";base64,"))
        .map(|(_, d)| d)
        .ok_or("only data:image/...;base64 URLs are accepted (the server fetches nothing)")?;
    let bytes = base64::engine::general_purpose::STANDARD.decode(data).map_err(|e| format!("bad base64: {e}"))?;
    let img = image::load_from_memory(&bytes).map_err(|e| format!("not an image: {e}"))?.to_rgb8();
    Ok(Image { width: img.width(), height: img.height(), rgb: img.into_raw() })
}

fn job(
    body: &Value,
    vision: bool,
    adapter: usize,
) -> Result<(Job, tokio::sync::oneshot::Receiver<Result<Answer, String>>), String> {
    let (messages, images) = read_messages(body, vision)?;
    if body["n"].as_u64().is_some_and(|n| n != 1) {
        return Err("n: only 1 completion per request".into());
    }
    let number = |key: &str, default: f64| -> Result<f64, String> {
        match &body[key] {
            Value::Null => Ok(default),
            v => v.as_f64().filter(|x| x.is_finite()).ok_or(format!("{key} must be a number")),
        }
    };
    let temperature = number("temperature", 1.0)?;
    let top_p = number("top_p", 1.0)?;
    if temperature < 0.0 || !(top_p > 0.0 && top_p <= 1.0) {
        return Err(format!("temperature {temperature} must be >= 0 and top_p {top_p} in (0, 1]"));
    }
    let max_tokens = body["max_completion_tokens"].as_u64().or(body["max_tokens"].as_u64()).unwrap_or(256) as usize;
    if max_tokens == 0 {
        return Err("max_tokens must be at least 1".into());
    }
    let stop = match &body["stop"] {
        Value::Null => vec![],
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect(),
        _ => return Err("stop must be a string or a list of strings".into()),
    };
    let (reply, answer) = tokio::sync::oneshot::channel();
    let seed = body["seed"].as_u64();
    Ok((Job { messages, images, max_tokens, temperature, top_p, stop, seed, adapter, reply }, answer))
}

async fn chat(State(s): State<Arc<Shared>>, body: axum::body::Bytes) -> Response {
    let body: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("the body is not JSON: {e}")),
    };
    let Some(adapter) = adapter_of(&s, &body) else {
        let message = format!("model {}: not served here (served: {})", body["model"], s.names.join(", "));
        let body =
            json!({ "error": { "message": message, "type": "invalid_request_error", "code": "model_not_found" } });
        return (StatusCode::NOT_FOUND, Json(body)).into_response();
    };
    let model = s.names[adapter].clone();
    let (job, answer) = match job(&body, s.has_vision, adapter) {
        Ok(j) => j,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    s.requests.fetch_add(1, Ordering::SeqCst);
    if s.jobs.send(job).is_err() {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "the generation thread has stopped");
    }
    let answer = match answer.await {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => return error(StatusCode::BAD_REQUEST, e),
        Err(_) => return error(StatusCode::INTERNAL_SERVER_ERROR, "the generation thread dropped the request"),
    };
    let id = format!("chatcmpl-{:x}", now() ^ s.requests.load(Ordering::SeqCst) as u64);
    let finish = match answer.finish {
        FinishReason::Length => "length",
        FinishReason::Eos | FinishReason::Stop => "stop",
    };
    if body["stream"].as_bool() == Some(true) {
        return stream(&model, &id, &answer.text, finish);
    }
    Json(json!({
        "id": id,
        "object": "chat.completion",
        "created": now(),
        "model": model,
        "choices": [{ "index": 0, "message": { "role": "assistant", "content": answer.text }, "finish_reason": finish }],
        "usage": {
            "prompt_tokens": answer.prompt_tokens,
            "completion_tokens": answer.completion_tokens,
            "total_tokens": answer.prompt_tokens + answer.completion_tokens,
        },
    }))
    .into_response()
}

/// The completion as server-sent events: the role, the text a word at a time, the finish
/// reason, `[DONE]`. (Sent once the batch is generated: the engine does not yield tokens.)
fn stream(model: &str, id: &str, text: &str, finish: &str) -> Response {
    let chunk = |delta: Value, finish: Value| {
        let c = json!({
            "id": id, "object": "chat.completion.chunk", "created": now(), "model": model,
            "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }],
        });
        format!("data: {c}\n\n")
    };
    let mut body = chunk(json!({ "role": "assistant", "content": "" }), Value::Null);
    for piece in text.split_inclusive(char::is_whitespace) {
        body.push_str(&chunk(json!({ "content": piece }), Value::Null));
    }
    body.push_str(&chunk(json!({}), json!(finish)));
    body.push_str("data: [DONE]\n\n");
    ([(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")], Body::from(body))
        .into_response()
}
