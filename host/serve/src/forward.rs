//! Harness episodes answered by another server (`vagen-host eval --policy openai` of a
//! harness config): each episode keeps its own URL, key and reward route here, and its calls
//! are sent on to the endpoint with the evaluation's sampling in place of the harness's (as a
//! training run's own evaluations sample), so its figures are the run's. Nothing is recorded
//! but the transcript.

use crate::episodes::EpisodeBook;
use crate::harness::{HarnessConfig, HarnessRun, Task, run_episodes};
use crate::server::{ServerOptions, error_with, forwarding_server};
use anyhow::Result;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;
use vagen_policy::openai::ChatRequest;

/// Where forwarded calls go: an OpenAI-compatible server and the model it is asked for.
#[derive(Debug, Clone)]
pub struct Forward {
    /// Its base URL, `…/v1`.
    pub base_url: String,
    pub model: String,
    /// Sent as `Authorization: Bearer …` when set.
    pub api_key: Option<String>,
    /// Seconds a call may take.
    pub timeout_s: u64,
}

/// Runs `tasks` as harness episodes whose calls `forward` answers (see the module's doc).
pub fn forward_episodes(
    forward: Forward,
    harness: &HarnessConfig,
    tasks: Vec<Task>,
    sampling: crate::EpisodeSampling,
    need_reward: bool,
) -> Result<Vec<HarnessRun>> {
    let book = Arc::new(EpisodeBook::new(sampling));
    let rows = NonZeroUsize::new(harness.concurrency.max(1)).expect("at least 1");
    let app = forwarding_server(&ServerOptions::for_episodes(rows), book.clone(), Arc::new(forward));
    let (runtime, base) = crate::hosted::on_loopback(app, rows)?;
    let runs = run_episodes(harness, tasks, &book, &base, need_reward);
    drop(runtime);
    Ok(runs)
}

/// Sends episode `id`'s call `r` on, sampled as the book says; the endpoint's answer (or its
/// error) goes back as it came.
pub(crate) async fn forward_call(book: &EpisodeBook, f: &Forward, id: &str, mut r: ChatRequest) -> Response {
    if r.stream == Some(true) {
        let message = "streaming is not forwarded to the evaluated endpoint: ask without stream";
        return error_with(StatusCode::BAD_REQUEST, message, Some("stream"), None);
    }
    if r.n.is_some_and(|n| n != 1) {
        return error_with(StatusCode::BAD_REQUEST, "an episode's call has one answer (n = 1)", Some("n"), None);
    }
    let Some(seed) = book.call_seed(id) else {
        return error_with(StatusCode::UNAUTHORIZED, format!("episode {id} has ended"), None, None);
    };
    let s = &book.sampling;
    let asked = r.messages.last().map(|m| text_of(&m.content)).unwrap_or_default();
    let cap =
        r.max_completion_tokens.or(r.max_tokens).map_or(s.max_new_tokens as i64, |m| m.min(s.max_new_tokens as i64));
    (r.model, r.temperature, r.top_p, r.seed) = (Some(f.model.clone()), Some(s.temperature), Some(s.top_p), Some(seed));
    (r.max_tokens, r.max_completion_tokens) = (Some(cap), None);
    let body = match serde_json::to_vec(&r) {
        Ok(b) => b,
        Err(e) => return error_with(StatusCode::BAD_REQUEST, e.to_string(), Some("body"), None),
    };
    let (url, key, timeout) = (format!("{}/chat/completions", f.base_url), f.api_key.clone(), f.timeout_s);
    let sent = tokio::task::spawn_blocking(move || post(&url, key.as_deref(), &body, timeout)).await;
    let (status, bytes) = match sent {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => return error_with(StatusCode::BAD_GATEWAY, e, None, Some("endpoint")),
        Err(_) => return error_with(StatusCode::INTERNAL_SERVER_ERROR, "the forwarding task failed", None, None),
    };
    if status == 200 {
        book.forwarded(id, asked, answer_text(&bytes));
    }
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    (status, [(axum::http::header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

/// The endpoint's status and body, or why it did not answer.
fn post(url: &str, key: Option<&str>, body: &[u8], timeout_s: u64) -> Result<(u16, Vec<u8>), String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(timeout_s)))
        .build()
        .into();
    let mut request = agent.post(url).header("content-type", "application/json");
    if let Some(k) = key {
        request = request.header("authorization", &format!("Bearer {k}"));
    }
    let mut response = request.send(body).map_err(|e| format!("{url}: {e}"))?;
    let status = response.status().as_u16();
    let bytes = response.body_mut().with_config().limit(16 << 20).read_to_vec().map_err(|e| format!("{url}: {e}"))?;
    Ok((status, bytes))
}

/// A message's text parts, joined.
fn text_of(content: &vagen_policy::openai::Content) -> String {
    use vagen_policy::openai::{Content, Part};
    match content {
        Content::Text(t) => t.clone(),
        Content::Parts(parts) => {
            parts.iter().filter_map(|p| if let Part::Text { text } = p { Some(text.as_str()) } else { None }).collect()
        }
        Content::Empty => String::new(),
    }
}

/// The first choice's text (its tool calls as JSON after it), for the transcript.
fn answer_text(bytes: &[u8]) -> String {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(bytes) else { return String::new() };
    let message = &v["choices"][0]["message"];
    let mut text = message["content"].as_str().unwrap_or_default().to_string();
    if let Some(calls) = message.get("tool_calls").filter(|c| !c.is_null()) {
        text.push_str(&calls.to_string());
    }
    text
}
