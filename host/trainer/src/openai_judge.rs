//! The `openai` judge backend: reward functions' judge requests sent to an OpenAI-compatible
//! `/v1/chat/completions` endpoint (vLLM, SGLang, `vagen-host serve`, a hosted API), at most
//! `concurrency` at a time and `requests_per_minute`, each with a timeout and bounded retries
//! with backoff; answers are kept in an on-disk cache keyed by the request, so a resumed run
//! pays for nothing twice. A request that still fails is that turn's error, with the reason.

use anyhow::{Context, Result};
use base64::Engine as _;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use vagen_policy::openai::{ChatMessage, ChatRequest, ChatResponse, Content, ImageUrl, Part};
use vagen_runtime::Sealer;
use vagen_runtime::reward::{Judge, JudgePart, JudgeRequest};

/// The longest judge answer kept in the cache (far past any `max_tokens` a judge is asked).
const MAX_ANSWER_BYTES: u64 = 1 << 20;

/// Where and how to ask.
#[derive(Debug, Clone)]
pub struct OpenAiOptions {
    /// The server's base URL, e.g. `http://127.0.0.1:8000/v1`.
    pub url: String,
    /// The `model` field of each request.
    pub model: String,
    /// A bearer token, when the server wants one.
    pub api_key: Option<String>,
    pub concurrency: usize,
    /// 0: no limit.
    pub requests_per_minute: usize,
    pub timeout: Duration,
    /// Attempts after the first, for connection errors, timeouts, 429 and 5xx answers.
    pub retries: usize,
    /// The first retry waits this long, each next one twice as long.
    pub backoff: Duration,
    /// Answers kept by request; `None`: no cache.
    pub cache: Option<PathBuf>,
}

/// What the backend did, summed since it was made.
#[derive(Debug, Default)]
pub struct OpenAiCounts {
    pub sent: AtomicUsize,
    pub cache_hits: AtomicUsize,
    pub retries: AtomicUsize,
    pub failed: AtomicUsize,
}

pub struct OpenAiJudge {
    options: OpenAiOptions,
    /// Authenticates cache entries (`None`: no private key, so no cache is used).
    sealer: Option<Sealer>,
    agent: ureq::Agent,
    /// When the last requests were sent, for `requests_per_minute`.
    sent_at: Mutex<std::collections::VecDeque<Instant>>,
    pub counts: OpenAiCounts,
}

impl OpenAiJudge {
    pub fn new(options: OpenAiOptions) -> Result<Self> {
        let mut sealer = None;
        if let Some(dir) = &options.cache {
            std::fs::create_dir_all(dir).with_context(|| format!("creating the judge cache {}", dir.display()))?;
            match Sealer::for_user() {
                Ok(s) => sealer = Some(s),
                Err(why) => {
                    eprintln!("warning: the judge cache is not used (no private key to authenticate it: {why})")
                }
            }
        }
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(options.timeout))
            .http_status_as_error(false)
            .build()
            .new_agent();
        Ok(OpenAiJudge {
            options,
            sealer,
            agent,
            sent_at: Mutex::new(Default::default()),
            counts: OpenAiCounts::default(),
        })
    }

    fn body(&self, r: &JudgeRequest) -> Value {
        let messages: Vec<ChatMessage> = r
            .messages
            .iter()
            .map(|m| {
                let only_text: Option<String> = m
                    .content
                    .iter()
                    .map(|p| match p {
                        JudgePart::Text(t) => Some(t.as_str()),
                        JudgePart::Image(_) => None,
                    })
                    .collect::<Option<Vec<&str>>>()
                    .map(|parts| parts.concat());
                let content = match only_text {
                    Some(text) => Content::Text(text),
                    None => Content::Parts(m.content.iter().map(part).collect()),
                };
                ChatMessage { role: m.role.clone(), content }
            })
            .collect();
        // The same question draws the same answer (as the local judge's): servers that
        // honour `seed` (ours, OpenAI's best effort) answer it reproducibly.
        let digest = Sha256::digest(serde_json::to_string(&messages).unwrap_or_default().as_bytes());
        let seed = u64::from_le_bytes(digest[..8].try_into().expect("8 bytes"));
        let request = ChatRequest {
            model: Some(self.options.model.clone()),
            messages,
            max_tokens: Some(i64::from(r.max_tokens)),
            temperature: Some(r.temperature),
            seed: Some(seed),
            ..ChatRequest::default()
        };
        serde_json::to_value(request).expect("plain data")
    }

    /// The entry's path and what it is sealed for (the request's digest).
    fn cache_entry(&self, body: &Value) -> Option<(PathBuf, String)> {
        let dir = self.options.cache.as_ref()?;
        self.sealer.as_ref()?;
        let key = hex::encode(Sha256::digest(format!("{}\n{body}", self.options.url).as_bytes()));
        Some((dir.join(format!("{key}.txt")), key))
    }

    /// A cached answer: sealed for this request by this user's key, at most
    /// [`MAX_ANSWER_BYTES`]; anything else (edited, moved, a link, a pipe, too big) is a miss.
    fn cached(&self, body: &Value) -> Option<String> {
        let (path, key) = self.cache_entry(body)?;
        let payload = self.sealer.as_ref()?.open(key.as_bytes(), &path, MAX_ANSWER_BYTES)?;
        String::from_utf8(payload).ok()
    }

    fn remember(&self, body: &Value, answer: &str) {
        let (Some((path, key)), Some(sealer)) = (self.cache_entry(body), self.sealer.as_ref()) else { return };
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
        // A fresh file of our own (never someone's file or link at that name), then renamed.
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| f.write_all(&sealer.seal(key.as_bytes(), answer.as_bytes())));
        if written.is_ok() {
            let _ = std::fs::rename(&tmp, &path);
        } else {
            let _ = std::fs::remove_file(&tmp);
        }
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

    /// One request with its retries.
    fn ask(&self, body: &Value) -> Result<String, String> {
        if let Some(text) = self.cached(body) {
            self.counts.cache_hits.fetch_add(1, Ordering::SeqCst);
            return Ok(text);
        }
        let url = format!("{}/chat/completions", self.options.url.trim_end_matches('/'));
        let mut last = String::new();
        for attempt in 0..=self.options.retries {
            if attempt > 0 {
                self.counts.retries.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(self.options.backoff * (1 << (attempt - 1).min(10)));
            }
            self.pace();
            self.counts.sent.fetch_add(1, Ordering::SeqCst);
            let mut req = self.agent.post(&url);
            if let Some(key) = &self.options.api_key {
                req = req.header("Authorization", &format!("Bearer {key}"));
            }
            match req.send_json(body) {
                Err(e) => last = format!("{url}: {e}"),
                Ok(mut response) => {
                    let status = response.status().as_u16();
                    let text = response.body_mut().read_to_string().unwrap_or_default();
                    if status == 200 {
                        let answer = serde_json::from_str::<ChatResponse>(&text)
                            .ok()
                            .and_then(|v| v.choices.into_iter().next())
                            .and_then(|c| c.message.content);
                        return match answer {
                            Some(answer) => {
                                self.remember(body, &answer);
                                Ok(answer)
                            }
                            None => Err(format!("{url}: an answer without choices[0].message.content")),
                        };
                    }
                    last = format!("{url}: HTTP {status}: {}", text.chars().take(200).collect::<String>());
                    // The request itself is wrong: asking again gives the same answer.
                    if status != 429 && status < 500 {
                        break;
                    }
                }
            }
        }
        self.counts.failed.fetch_add(1, Ordering::SeqCst);
        Err(last)
    }
}

fn part(p: &JudgePart) -> Part {
    match p {
        JudgePart::Text(t) => Part::Text { text: t.clone() },
        JudgePart::Image(i) => {
            let mut png = vec![];
            let ok = image::RgbImage::from_raw(i.width, i.height, i.rgb.clone())
                .map(|img| img.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png).is_ok());
            let url = if ok == Some(true) {
                format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(&png))
            } else {
                String::new()
            };
            Part::ImageUrl { image_url: ImageUrl { url, detail: None } }
        }
    }
}

impl Judge for OpenAiJudge {
    fn complete(&self, requests: &[JudgeRequest]) -> Vec<Result<String, String>> {
        let bodies: Vec<Value> = requests.iter().map(|r| self.body(r)).collect();
        let answers: Vec<Mutex<Option<Result<String, String>>>> = bodies.iter().map(|_| Mutex::new(None)).collect();
        let next = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..self.options.concurrency.max(1).min(bodies.len()) {
                s.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, Ordering::SeqCst);
                        let Some(body) = bodies.get(i) else { break };
                        *answers[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(self.ask(body));
                    }
                });
            }
        });
        answers
            .into_iter()
            .map(|a| a.into_inner().unwrap_or_else(|p| p.into_inner()).unwrap_or_else(|| Err("not asked".into())))
            .collect()
    }

    fn counts(&self) -> Vec<(&'static str, usize)> {
        let c = &self.counts;
        let get = |a: &AtomicUsize| a.load(Ordering::SeqCst);
        vec![
            ("sent", get(&c.sent)),
            ("cache_hits", get(&c.cache_hits)),
            ("retries", get(&c.retries)),
            ("failed", get(&c.failed)),
        ]
    }
}
