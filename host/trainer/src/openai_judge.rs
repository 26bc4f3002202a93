//! The `openai` judge backend: reward functions' judge requests sent to an OpenAI-compatible
//! `/v1/chat/completions` endpoint (vLLM, SGLang, `vagen-host serve`, a hosted API), at most
//! `concurrency` at a time and `requests_per_minute`, each with a timeout and bounded retries
//! with backoff; answers are kept in an on-disk cache keyed by the request, so a resumed run
//! pays for nothing twice. A request that still fails is that turn's error, with the reason.

use anyhow::{Context, Result};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use vagen_policy::endpoint::{Endpoint, EndpointOptions, data_url};
use vagen_policy::openai::{ChatMessage, ChatRequest, Content, ImageUrl, Part};
use vagen_runtime::Sealer;
use vagen_runtime::reward::{Judge, JudgePart, JudgeRequest};

/// The longest judge answer kept in the cache (far past any `max_tokens` a judge is asked).
const MAX_ANSWER_BYTES: u64 = 1 << 20;

/// Where and how to ask, and where answers are kept.
#[derive(Debug, Clone)]
pub struct OpenAiOptions {
    pub endpoint: EndpointOptions,
    /// Answers kept by request; `None`: no cache.
    pub cache: Option<PathBuf>,
}

/// What the cache did (the requests' own counts are the endpoint's).
#[derive(Debug, Default)]
pub struct OpenAiCounts {
    pub cache_hits: AtomicUsize,
}

pub struct OpenAiJudge {
    endpoint: Endpoint,
    /// Answers kept by request; `None`: no cache.
    cache: Option<PathBuf>,
    /// Authenticates cache entries (`None`: no private key, so no cache is used).
    sealer: Option<Sealer>,
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
        let endpoint = Endpoint::new(options.endpoint);
        Ok(OpenAiJudge { endpoint, cache: options.cache, sealer, counts: OpenAiCounts::default() })
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
                ChatMessage::new(m.role.clone(), content)
            })
            .collect();
        // The same question draws the same answer (as the local judge's): servers that
        // honour `seed` (ours, OpenAI's best effort) answer it reproducibly.
        let digest = Sha256::digest(serde_json::to_string(&messages).unwrap_or_default().as_bytes());
        let seed = u64::from_le_bytes(digest[..8].try_into().expect("8 bytes"));
        let request = ChatRequest {
            model: Some(self.endpoint.options.model.clone()),
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
        let dir = self.cache.as_ref()?;
        self.sealer.as_ref()?;
        let key = hex::encode(Sha256::digest(format!("{}\n{body}", self.endpoint.options.url).as_bytes()));
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

    /// One request (with the endpoint's retries), or the cache's answer.
    fn ask(&self, body: &Value) -> Result<String, String> {
        if let Some(text) = self.cached(body) {
            self.counts.cache_hits.fetch_add(1, Ordering::SeqCst);
            return Ok(text);
        }
        let answer: Option<String> = self
            .endpoint
            .complete(body)
            .map_err(|e| e.message)?
            .choices
            .into_iter()
            .next()
            .and_then(|c| c.message.content);
        match answer {
            Some(answer) => {
                self.remember(body, &answer);
                Ok(answer)
            }
            None => Err(format!("{}: an answer without choices[0].message.content", self.endpoint.completions_url())),
        }
    }
}

fn part(p: &JudgePart) -> Part {
    match p {
        JudgePart::Text(t) => Part::Text { text: t.clone() },
        JudgePart::Image(i) => Part::ImageUrl { image_url: ImageUrl { url: data_url(i), detail: None } },
    }
}

impl Judge for OpenAiJudge {
    fn complete(&self, requests: &[JudgeRequest]) -> Vec<Result<String, String>> {
        let bodies: Vec<Value> = requests.iter().map(|r| self.body(r)).collect();
        self.endpoint.fan_out(bodies.len(), |i| self.ask(&bodies[i]))
    }

    fn counts(&self) -> Vec<(&'static str, usize)> {
        let [sent, retries, failed] = self.endpoint.counts.get();
        vec![sent, ("cache_hits", self.counts.cache_hits.load(Ordering::SeqCst)), retries, failed]
    }
}
