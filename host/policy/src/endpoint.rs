//! A client of an OpenAI-compatible `/v1/chat/completions` endpoint (vLLM, SGLang,
//! `vagen-host serve`, a hosted API), shared by the trainer's `openai` judge and `eval
//! --policy openai`: at most `concurrency` requests at a time and `requests_per_minute`,
//! each with a timeout and bounded retries with backoff on what may pass (connection errors,
//! timeouts, 429, 5xx). A request that still fails comes back as the last reason, never a
//! panic or a silent empty answer.

use crate::openai::ChatResponse;
use base64::Engine as _;
use serde_json::Value;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use vagen_runtime::Image;

/// Where and how to ask.
#[derive(Debug, Clone)]
pub struct EndpointOptions {
    /// The server's base URL, e.g. `http://127.0.0.1:8000/v1`.
    pub url: String,
    /// The `model` field of each request.
    pub model: String,
    /// A bearer token, when the server wants one.
    pub api_key: Option<String>,
    pub concurrency: usize,
    /// 0: no limit.
    pub requests_per_minute: usize,
    /// Per attempt: a server that stalls past it is retried like one that failed.
    pub timeout: Duration,
    /// Attempts after the first, for connection errors, timeouts, 429 and 5xx answers.
    pub retries: usize,
    /// The first retry waits this long, each next one twice as long.
    pub backoff: Duration,
}

/// Why a request has no answer: the last attempt's reason, and its HTTP status if it got one.
#[derive(Debug, Clone, PartialEq)]
pub struct CallError {
    pub status: Option<u16>,
    pub message: String,
}

impl CallError {
    /// The endpoint refused who is asking or what for (a key, a permission, a model or URL
    /// that is not there): every request would get the same answer.
    pub fn is_setup(&self) -> bool {
        matches!(self.status, Some(401 | 403 | 404))
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// What the client did, summed since it was made.
#[derive(Debug, Default)]
pub struct EndpointCounts {
    pub sent: AtomicUsize,
    pub retries: AtomicUsize,
    pub failed: AtomicUsize,
}

impl EndpointCounts {
    pub fn get(&self) -> [(&'static str, usize); 3] {
        let get = |a: &AtomicUsize| a.load(Ordering::SeqCst);
        [("sent", get(&self.sent)), ("retries", get(&self.retries)), ("failed", get(&self.failed))]
    }
}

pub struct Endpoint {
    pub options: EndpointOptions,
    agent: ureq::Agent,
    /// When the last requests were sent, for `requests_per_minute`.
    sent_at: Mutex<std::collections::VecDeque<Instant>>,
    pub counts: EndpointCounts,
}

impl Endpoint {
    pub fn new(options: EndpointOptions) -> Self {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(options.timeout))
            .http_status_as_error(false)
            .build()
            .new_agent();
        Endpoint { options, agent, sent_at: Mutex::new(Default::default()), counts: EndpointCounts::default() }
    }

    /// `base/chat/completions`.
    pub fn completions_url(&self) -> String {
        format!("{}/chat/completions", self.options.url.trim_end_matches('/'))
    }

    /// Waits until one more request fits in the last minute's budget.
    fn pace(&self) {
        let limit = self.options.requests_per_minute;
        if limit == 0 {
            return;
        }
        loop {
            let mut sent = self.sent_at.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            while sent.front().is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(60)) {
                sent.pop_front();
            }
            if sent.len() < limit {
                sent.push_back(now);
                return;
            }
            let wait = Duration::from_secs(60).saturating_sub(now.duration_since(sent[0]));
            drop(sent);
            std::thread::sleep(wait.min(Duration::from_millis(200)));
        }
    }

    /// One chat completion with its retries: the parsed answer, or why there is none.
    pub fn complete(&self, body: &Value) -> Result<ChatResponse, CallError> {
        let url = self.completions_url();
        let mut last = CallError { status: None, message: String::new() };
        // A server's own `Retry-After` (seconds, at most a minute), when longer than the backoff.
        let mut asked_wait = Duration::ZERO;
        for attempt in 0..=self.options.retries {
            if attempt > 0 {
                self.counts.retries.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep((self.options.backoff * (1 << (attempt - 1).min(10))).max(asked_wait));
            }
            self.pace();
            self.counts.sent.fetch_add(1, Ordering::SeqCst);
            let mut req = self.agent.post(&url);
            if let Some(key) = &self.options.api_key {
                req = req.header("Authorization", &format!("Bearer {key}"));
            }
            match req.send_json(body) {
                Err(e) => last = CallError { status: None, message: format!("{url}: {e}") },
                Ok(mut response) => {
                    let status = response.status().as_u16();
                    asked_wait = retry_after(response.headers());
                    let text = response.body_mut().read_to_string();
                    match (status, text) {
                        (200, Ok(text)) => {
                            return serde_json::from_str::<ChatResponse>(&text).map_err(|e| {
                                self.counts.failed.fetch_add(1, Ordering::SeqCst);
                                let message = format!("{url}: not a chat completion ({e}): {}", head(&text));
                                CallError { status: Some(200), message }
                            });
                        }
                        // Cut off mid-body: the connection closed, which may pass.
                        (200, Err(e)) => {
                            last = CallError { status: None, message: format!("{url}: reading the answer: {e}") }
                        }
                        (status, text) => {
                            let message = format!("{url}: HTTP {status}: {}", head(&text.unwrap_or_default()));
                            last = CallError { status: Some(status), message };
                            // The request itself is wrong: asking again gives the same answer.
                            if status != 429 && status < 500 {
                                break;
                            }
                        }
                    }
                }
            }
        }
        self.counts.failed.fetch_add(1, Ordering::SeqCst);
        Err(last)
    }

    /// `ask(i)` for every `i < n`, `concurrency` at a time (each a request, usually);
    /// answers in order.
    pub fn fan_out<T: Send>(&self, n: usize, ask: impl Fn(usize) -> T + Sync) -> Vec<T> {
        let answers: Vec<Mutex<Option<T>>> = (0..n).map(|_| Mutex::new(None)).collect();
        let next = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..self.options.concurrency.max(1).min(n) {
                s.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, Ordering::SeqCst);
                        if i >= n {
                            break;
                        }
                        let answer = ask(i);
                        *answers[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(answer);
                    }
                });
            }
        });
        answers
            .into_iter()
            .map(|a| a.into_inner().unwrap_or_else(|p| p.into_inner()).expect("every index is asked"))
            .collect()
    }
}

/// A `Retry-After` header's seconds (at most 60; its HTTP-date form is not read).
fn retry_after(headers: &ureq::http::HeaderMap) -> Duration {
    let seconds = headers.get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<u64>().ok());
    Duration::from_secs(seconds.unwrap_or(0).min(60))
}

/// The first 200 characters of a body, for an error.
fn head(text: &str) -> String {
    text.chars().take(200).collect()
}

/// `image` as a `data:image/png;base64,…` URL (empty for pixels that do not make an image).
pub fn data_url(image: &Image) -> String {
    let mut png = vec![];
    let ok = image::RgbImage::from_raw(image.width, image.height, image.rgb.clone())
        .map(|img| img.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png).is_ok());
    if ok == Some(true) {
        format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(&png))
    } else {
        String::new()
    }
}
