//! Reading a chat-completions request: which fields are served, ignored or refused, the
//! messages and their images (counted, sized from their headers, then decoded), and the
//! [`Job`] the worker generates.

use crate::episodes::EpisodeBook;
use crate::server::{Shared, fresh_seed};
use crate::worker::{Job, Replier};
use axum::http::StatusCode;
use base64::Engine as _;
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use vagen_model::{IMAGE_MARKER, Image, Message};
use vagen_policy::openai::{ChatRequest, Content, Part};

/// Fields of OpenAI's request that change what is generated and that this server does not
/// implement: refused, never ignored.
pub(crate) const NOT_IMPLEMENTED: &[&str] = &[
    "functions",
    "function_call",
    "logit_bias",
    "audio",
    "modalities",
    "prediction",
    "web_search_options",
    "reasoning_effort",
];

/// Fields that do not change the answer, accepted and not used.
pub(crate) const IGNORED: &[&str] = &["user", "metadata", "store", "service_tier"];

/// How many pictures a request may hold and how large they may be, checked from the
/// request and the images' headers before any is decoded (a 49 KB PNG decodes to 50 MB).
#[derive(Debug, Clone, Copy)]
pub struct ImageLimits {
    pub per_request: usize,
    pub pixels_per_image: u64,
    pub pixels_per_request: u64,
}

/// Pixels of decoded pictures the server holds at once, over every request in it: a request
/// takes its share before decoding and gives it back when it is answered or dropped.
pub(crate) struct PixelBudget {
    held: AtomicU64,
    pub max: u64,
}

/// A request's share of the [`PixelBudget`], returned when dropped.
pub(crate) struct PixelHold {
    budget: Arc<PixelBudget>,
    pixels: u64,
}

impl PixelBudget {
    pub fn new(max: u64) -> Arc<Self> {
        Arc::new(PixelBudget { held: AtomicU64::new(0), max })
    }

    fn take(self: &Arc<Self>, pixels: u64) -> Option<PixelHold> {
        let fits = |held: u64| held.checked_add(pixels).filter(|&h| h <= self.max);
        self.held.fetch_update(Ordering::SeqCst, Ordering::SeqCst, fits).ok()?;
        Some(PixelHold { budget: self.clone(), pixels })
    }
}

impl Drop for PixelHold {
    fn drop(&mut self) {
        self.budget.held.fetch_sub(self.pixels, Ordering::SeqCst);
    }
}

/// A request's messages (text with `<image>` markers), its images and their hold on the
/// server's pixel budget.
struct Messages {
    messages: Vec<Message>,
    images: Vec<Image>,
    pixels: Option<PixelHold>,
}

/// The request's messages and images, or what is wrong.
fn read_messages(
    r: &ChatRequest,
    vision: bool,
    limits: ImageLimits,
    budget: &Arc<PixelBudget>,
) -> Result<Messages, Refused> {
    if r.messages.is_empty() {
        return Err(refused("messages", "messages is empty"));
    }
    let count = r
        .messages
        .iter()
        .filter_map(|m| if let Content::Parts(p) = &m.content { Some(p) } else { None })
        .flatten()
        .filter(|p| matches!(p, Part::ImageUrl { .. }))
        .count();
    if count > limits.per_request {
        let message = format!("{count} images: at most {} per request (--max-images)", limits.per_request);
        return Err(refused("messages", message));
    }
    let mut pending = vec![];
    let mut out = vec![];
    for (i, m) in r.messages.iter().enumerate() {
        let role = m.template_role().map_err(|e| refused("messages", format!("messages[{i}].{e}")))?;
        let text = message_text(i, &m.content, role, vision, limits, &mut pending)?;
        let mut message = Message::new(role, text);
        message.tool_calls = m.template_tool_calls().map_err(|e| refused("messages", format!("messages[{i}]: {e}")))?;
        message.tool_call_id = m.tool_call_id.clone();
        out.push(message);
    }
    let (images, pixels) = decoded(pending, limits, budget)?;
    Ok(Messages { messages: out, images, pixels })
}

/// A message's text, an `<image>` marker where each picture goes; the pictures' headers are
/// read into `pending`, not yet decoded.
fn message_text(
    i: usize,
    content: &Content,
    role: &str,
    vision: bool,
    limits: ImageLimits,
    pending: &mut Vec<Encoded>,
) -> Result<String, Refused> {
    let parts = match content {
        Content::Text(s) => return Ok(s.clone()),
        Content::Empty => return Ok(String::new()),
        Content::Parts(parts) => parts,
    };
    let mut text = String::new();
    for (k, p) in parts.iter().enumerate() {
        match p {
            Part::Text { text: t } => text.push_str(t),
            Part::ImageUrl { image_url } => {
                let at = |e: String| refused("messages", format!("messages[{i}].content[{k}]: {e}"));
                if role != "user" {
                    return Err(at("images are accepted in user messages only".into()));
                }
                if !vision {
                    return Err(at("this model has no vision tower; send text only".into()));
                }
                pending.push(Encoded::read(&image_url.url, limits.pixels_per_image).map_err(at)?);
                text.push_str(IMAGE_MARKER);
            }
        }
    }
    Ok(text)
}

/// The pictures decoded, once their pixels fit the request's bound and the server's budget
/// (whose share they then hold).
fn decoded(
    pending: Vec<Encoded>,
    limits: ImageLimits,
    budget: &Arc<PixelBudget>,
) -> Result<(Vec<Image>, Option<PixelHold>), Refused> {
    let pixels: u64 = pending.iter().map(|e| e.pixels).sum();
    if pixels > limits.pixels_per_request {
        let message = format!(
            "the images hold {pixels} pixels: at most {} per request (--max-request-pixels)",
            limits.pixels_per_request
        );
        return Err(refused("messages", message));
    }
    let hold = match pixels {
        0 => None,
        _ => Some(budget.take(pixels).ok_or_else(|| Refused {
            status: StatusCode::SERVICE_UNAVAILABLE,
            ..refused(
                "messages",
                format!(
                    "the server holds as many pictures as it may (--max-server-pixels {}): try again shortly",
                    budget.max
                ),
            )
        })?),
    };
    let images =
        pending.into_iter().map(Encoded::decode).collect::<Result<Vec<_>, _>>().map_err(|e| refused("messages", e))?;
    Ok((images, hold))
}

/// An image as sent: its file's bytes and its size, read from the header.
struct Encoded {
    bytes: Vec<u8>,
    pixels: u64,
}

impl Encoded {
    /// A `data:image/...;base64,` URL (no URL is fetched; PNG, JPEG, WebP or GIF), refused
    /// from its header when it has more than `max_pixels`.
    fn read(url: &str, max_pixels: u64) -> Result<Self, String> {
        let data = url
            .strip_prefix("data:")
            .and_then(|r| r.split_once(";base64,"))
            .map(|(_, d)| d)
            .ok_or("only data:image/...;base64 URLs are accepted (the server fetches nothing)")?;
        let bytes = base64::engine::general_purpose::STANDARD.decode(data).map_err(|e| format!("bad base64: {e}"))?;
        let (w, h) = reader(&bytes)?.into_dimensions().map_err(|e| format!("not an image: {e}"))?;
        let pixels = u64::from(w) * u64::from(h);
        if pixels > max_pixels {
            return Err(format!("a {w}x{h} image has more than {max_pixels} pixels (--max-image-pixels)"));
        }
        Ok(Encoded { bytes, pixels })
    }

    fn decode(self) -> Result<Image, String> {
        let img = reader(&self.bytes)?.decode().map_err(|e| format!("not an image: {e}"))?.to_rgb8();
        Ok(Image { width: img.width(), height: img.height(), rgb: img.into_raw() })
    }
}

fn reader(bytes: &[u8]) -> Result<image::ImageReader<std::io::Cursor<&[u8]>>, String> {
    image::ImageReader::new(std::io::Cursor::new(bytes)).with_guessed_format().map_err(|e| format!("not an image: {e}"))
}

/// What the worker generates for `r`, or the field that refuses it.
pub(crate) fn job(r: &ChatRequest, s: &Shared, adapter: usize, reply: Replier) -> Result<Job, Refused> {
    for (key, value) in &r.other {
        if let Some(&name) = NOT_IMPLEMENTED.iter().find(|n| **n == key.as_str()) {
            if !value.is_null() {
                return Err(refused(name, format!("{name}: not supported by this server")));
            }
        } else if key == "parallel_tool_calls" {
            // Read with the tools (`tools.rs`).
        } else if key == "response_format" {
            response_format(value)?;
        } else if let Some(&name) = ["frequency_penalty", "presence_penalty"].iter().find(|n| **n == key.as_str()) {
            if !(value.is_null() || value.as_f64() == Some(0.0)) {
                return Err(refused(name, format!("{name}: only 0 is supported")));
            }
        } else if !IGNORED.contains(&key.as_str()) {
            return Err(refused("body", format!("{key}: not a chat-completions field this server knows")));
        }
    }
    let tools = crate::tools::tool_use(r, s.tool_format)?;
    let Messages { messages, images, pixels } = read_messages(r, s.has_vision, s.images, &s.pixels)?;
    let n = r.n.unwrap_or(1);
    if !(1..=s.max_batch as i64).contains(&n) {
        return Err(refused("n", format!("n {n}: must be a whole number from 1 to {} (--max-batch)", s.max_batch)));
    }
    let temperature = r.temperature.unwrap_or(1.0);
    if !(temperature.is_finite() && (0.0..=2.0).contains(&temperature)) {
        return Err(refused("temperature", format!("temperature {temperature}: must be in [0, 2]")));
    }
    let top_p = r.top_p.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(refused("top_p", format!("top_p {top_p}: must be in (0, 1]")));
    }
    let (param, asked) = match (r.max_completion_tokens, r.max_tokens) {
        (Some(m), _) => ("max_completion_tokens", Some(m)),
        (None, m) => ("max_tokens", m),
    };
    // Past the context's room, capped there (`answer_chats`).
    let max_tokens = match asked {
        None => 256,
        Some(m) if m >= 1 => usize::try_from(m).unwrap_or(usize::MAX),
        Some(m) => return Err(refused(param, format!("{param} {m}: must be at least 1"))),
    };
    let top_logprobs = match r.top_logprobs {
        None | Some(0) => 0,
        Some(k @ 1..=20) if r.logprobs == Some(true) => k as usize,
        Some(k @ 1..=20) => return Err(refused("top_logprobs", format!("top_logprobs {k}: needs logprobs = true"))),
        Some(k) => return Err(refused("top_logprobs", format!("top_logprobs {k}: must be from 0 to 20"))),
    };
    let stop = r.stop.as_ref().map(|s| s.strings()).unwrap_or_default();
    if stop.len() > 4 {
        return Err(refused("stop", format!("stop: {} strings, at most 4", stop.len())));
    }
    let base = r.seed.unwrap_or_else(fresh_seed);
    let seeds = (0..n as u64).map(|i| base.wrapping_add(i)).collect();
    let gone = Arc::new(AtomicBool::new(false));
    Ok(Job {
        messages,
        images,
        max_tokens,
        temperature,
        top_p,
        stop,
        seeds,
        top_logprobs,
        tools,
        adapter,
        reply,
        gone,
        pixels,
        arrived: s.counters.steps.load(std::sync::atomic::Ordering::SeqCst),
        top_k: 0,
        episode: None,
    })
}

/// Makes `job` the next call of recorded episode `id`: one answer, no images, sampled with
/// the run's settings (the harness's `temperature`, `top_p` and `seed` are not the policy
/// being trained), its `max_tokens` at most the run's.
pub(crate) fn into_episode(job: &mut Job, book: &EpisodeBook, id: String) -> Result<(), Refused> {
    if job.seeds.len() != 1 {
        return Err(refused(
            "n",
            "an episode's call has one answer (n = 1): the run plays a task again as episodes of its own",
        ));
    }
    if !job.images.is_empty() {
        return Err(refused("messages", "images in a recorded episode are not supported yet: its calls are text"));
    }
    let sampling = &book.sampling;
    job.temperature = sampling.temperature;
    job.top_p = sampling.top_p;
    job.top_k = sampling.top_k;
    job.max_tokens = job.max_tokens.min(sampling.max_new_tokens);
    let Some(seed) = book.call_seed(&id) else {
        return Err(Refused {
            status: StatusCode::UNAUTHORIZED,
            param: "episode",
            message: format!("episode {id} has ended"),
        });
    };
    job.seeds = vec![seed];
    job.episode = Some(id);
    Ok(())
}

/// A request refused for one of its fields.
#[derive(Debug)]
pub(crate) struct Refused {
    pub status: StatusCode,
    pub param: &'static str,
    pub message: String,
}

pub(crate) fn refused(param: &'static str, message: impl Into<String>) -> Refused {
    Refused { status: StatusCode::BAD_REQUEST, param, message: message.into() }
}

/// `response_format`: `text` (the default) is what every answer is; JSON output is refused
/// rather than promised, since nothing here constrains sampling to valid JSON.
fn response_format(value: &Value) -> Result<(), Refused> {
    match value.get("type").and_then(Value::as_str) {
        _ if value.is_null() => Ok(()),
        Some("text") => Ok(()),
        Some(kind @ ("json_object" | "json_schema")) => Err(refused(
            "response_format",
            format!(
                "response_format {kind}: not supported (this server does not constrain sampling to JSON); ask for \
                 JSON in the prompt and validate it, or leave response_format out"
            ),
        )),
        _ => Err(refused("response_format", "response_format: expected {\"type\": \"text\"}")),
    }
}
