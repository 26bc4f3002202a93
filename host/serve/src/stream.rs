//! Streaming: each token the engine's step sampled goes to its request's event channel (the
//! server-sent-event body reads from it); a channel whose body was dropped marks its
//! request gone, and the worker aborts its rows before the next step.

use crate::tokens::{TokenText, token_text};
use crate::tools::Streaming;
use axum::body::Body;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use vagen_model::{FinishReason, Sampled, Tokenizer, ToolCall};
use vagen_policy::openai::{
    ChatChunk, ChoiceLogprobs, ChunkChoice, Delta, DeltaFunction, DeltaToolCall, ErrorBody, ErrorDetail, Usage,
};

/// What a streamed request hears from the worker.
pub(crate) enum Event {
    /// A token of choice `choice` (`token`: its own text and bytes, for `logprobs`), and the
    /// text it completes (empty while a character is incomplete, or held back while it
    /// could still be part of a stop string).
    Token { choice: usize, id: u32, token: TokenText, logprob: f32, text: String, top: Vec<(TokenText, f32)> },
    /// Choice `choice` ended: the text not yet sent, its tool calls, why it ended, the bytes
    /// of a character it was cut inside, and its (prompt, completion) token counts.
    End {
        choice: usize,
        rest: String,
        calls: Vec<ToolCall>,
        /// It ends as `tool_calls` ([`crate::tools::ToolUse::ends_in_calls`]).
        ends_in_calls: bool,
        finish: FinishReason,
        partial: Option<Vec<u8>>,
        usage: (usize, usize),
    },
    /// No answer (its prompt was refused, or the generation failed).
    Failed(String),
}

/// Where one engine request's tokens go.
pub(crate) struct Route {
    pub choice: usize,
    /// Set when the request's client left (its handler or body stream was dropped).
    pub gone: Arc<AtomicBool>,
    pub events: Option<UnboundedSender<Event>>,
    ids: Vec<u32>,
    /// Bytes of the answer's text already sent.
    pub sent: usize,
    /// Alternatives per position to send.
    top_logprobs: usize,
    /// Bytes of text kept back until the end, while a stop string could still cut them.
    hold: usize,
    /// How much of the text goes out before the end (a tool call is sent whole, at the end).
    sending: Streaming,
}

impl Route {
    pub fn new(
        choice: usize,
        gone: Arc<AtomicBool>,
        events: Option<UnboundedSender<Event>>,
        top_logprobs: usize,
        hold: usize,
        sending: Streaming,
    ) -> Self {
        Route { choice, gone, events, ids: vec![], sent: 0, top_logprobs, hold, sending }
    }

    /// Streams a token just sampled for this route's choice (nothing when it is answered
    /// whole); a client that left is marked gone.
    pub fn send(&mut self, tokenizer: &Tokenizer, eos: &[u32], s: &Sampled) {
        let Some(events) = &self.events else { return };
        if !eos.contains(&s.token) {
            self.ids.push(s.token);
        }
        let text = fresh_text(tokenizer, &self.ids, &mut self.sent, self.hold, self.sending);
        let top = s.top.iter().take(self.top_logprobs).map(|&(t, l)| (token_text(tokenizer, t), l)).collect();
        let token = token_text(tokenizer, s.token);
        let event = Event::Token { choice: self.choice, id: s.token, token, logprob: s.logprob, text, top };
        if events.send(event).is_err() {
            self.gone.store(true, Ordering::SeqCst);
        }
    }
}

/// The text `ids` decode to past the `sent` bytes already sent, up to `hold` bytes short of
/// the end and what `sending` lets go, and never ending inside a character.
fn fresh_text(tokenizer: &Tokenizer, ids: &[u32], sent: &mut usize, hold: usize, sending: Streaming) -> String {
    let Ok(text) = tokenizer.decode(ids) else { return String::new() };
    if text.ends_with('\u{FFFD}') {
        return String::new();
    }
    let mut end = text.len().saturating_sub(hold).min(sending.sendable(&text));
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    if end <= *sent || !text.is_char_boundary(*sent) {
        return String::new();
    }
    let fresh = text[*sent..end].to_string();
    *sent = end;
    fresh
}

/// The text of a finished answer past the `sent` bytes the stream already holds.
pub(crate) fn rest_of(text: &str, sent: usize) -> String {
    if sent <= text.len() && text.is_char_boundary(sent) { text[sent..].to_string() } else { String::new() }
}

/// What the server-sent-event body needs to frame events.
pub(crate) struct Frame {
    pub id: String,
    pub model: String,
    pub choices: usize,
    pub logprobs: bool,
    /// End with a chunk of no choices holding the usage (`stream_options.include_usage`).
    pub include_usage: bool,
}

impl Frame {
    fn event(&self, choice: ChunkChoice) -> String {
        self.sse(vec![choice], None)
    }

    fn sse(&self, choices: Vec<ChunkChoice>, usage: Option<Usage>) -> String {
        let c = ChatChunk {
            id: self.id.clone(),
            object: "chat.completion.chunk".into(),
            created: crate::server::now(),
            model: self.model.clone(),
            choices,
            usage,
        };
        format!("data: {}\n\n", serde_json::to_string(&c).expect("plain data"))
    }

    /// The usage chunk, as the whole answer counts it: the prompt once, every choice's tokens.
    fn usage(&self, prompt_tokens: usize, completion_tokens: usize) -> String {
        let total_tokens = prompt_tokens + completion_tokens;
        self.sse(vec![], Some(Usage { prompt_tokens, completion_tokens, total_tokens }))
    }

    fn chunk(&self, index: usize, delta: Delta, finish: Option<String>) -> ChunkChoice {
        ChunkChoice { index, delta, finish_reason: finish, logprobs: None, token_ids: None, partial_bytes: None }
    }

    /// The events of one worker event, in order.
    fn frames(&self, event: Event) -> Vec<String> {
        match event {
            Event::Token { choice, id, token, logprob, text, top } => {
                let logprobs = self.logprobs.then(|| ChoiceLogprobs {
                    content: vec![crate::server::logprob_entry(&token, logprob, Some(&top))],
                });
                let delta = Delta { content: Some(text), ..Delta::default() };
                vec![self.event(ChunkChoice { logprobs, token_ids: Some(vec![id]), ..self.chunk(choice, delta, None) })]
            }
            Event::End { choice, rest, calls, ends_in_calls, finish, partial, usage: _ } => {
                let mut out = vec![];
                if !rest.is_empty() {
                    out.push(self.event(self.chunk(choice, Delta { content: Some(rest), ..Delta::default() }, None)));
                }
                if !calls.is_empty() {
                    // Each call whole in one piece: its index, id, name and arguments.
                    let pieces = calls
                        .iter()
                        .enumerate()
                        .map(|(index, c)| DeltaToolCall {
                            index,
                            id: Some(c.id.clone()),
                            kind: Some("function".into()),
                            function: Some(DeltaFunction {
                                name: Some(c.name.clone()),
                                arguments: Some(c.arguments.clone()),
                            }),
                        })
                        .collect();
                    out.push(self.event(self.chunk(
                        choice,
                        Delta { tool_calls: Some(pieces), ..Delta::default() },
                        None,
                    )));
                }
                let reason = crate::server::finish_reason(finish, ends_in_calls);
                let last = self.chunk(choice, Delta::default(), Some(reason.into()));
                out.push(self.event(ChunkChoice { partial_bytes: partial, ..last }));
                out
            }
            Event::Failed(message) => {
                let error = ErrorDetail { message, kind: "invalid_request_error".into(), param: None, code: None };
                let body = serde_json::to_string(&ErrorBody { error }).expect("plain data");
                vec![format!("data: {body}\n\n")]
            }
        }
    }
}

/// A stream's choices ended so far and their token counts.
#[derive(Default)]
struct Tally {
    ended: usize,
    prompt: usize,
    completion: usize,
}

/// The response: each choice's role, then events as the worker sends them, `[DONE]` once
/// every choice ended. `guard` lives as long as the body: a client that leaves drops it,
/// which marks the request gone and frees its rows at the next decode step.
pub(crate) fn body<G: Send + 'static>(frame: Frame, events: UnboundedReceiver<Event>, guard: G) -> Response {
    let first: VecDeque<String> = (0..frame.choices)
        .map(|i| {
            let delta = Delta { role: Some("assistant".into()), content: Some(String::new()), tool_calls: None };
            frame.event(frame.chunk(i, delta, None))
        })
        .collect();
    let state = (frame, events, guard, first, Tally::default(), false);
    let stream =
        futures_util::stream::unfold(state, |(frame, mut events, guard, mut queue, mut tally, done)| async move {
            loop {
                if let Some(next) = queue.pop_front() {
                    return Some((Ok::<_, std::convert::Infallible>(next), (frame, events, guard, queue, tally, done)));
                }
                if done {
                    return None;
                }
                let Some(event) = events.recv().await else {
                    let message = "the generation thread dropped the request".to_string();
                    queue.extend(frame.frames(Event::Failed(message)));
                    return queue.pop_front().map(|n| (Ok(n), (frame, events, guard, VecDeque::new(), tally, true)));
                };
                let failed = matches!(event, Event::Failed(_));
                if let Event::End { usage: (prompt, completion), .. } = event {
                    tally = Tally { ended: tally.ended + 1, prompt, completion: tally.completion + completion };
                }
                queue.extend(frame.frames(event));
                if failed || tally.ended == frame.choices {
                    if !failed {
                        if frame.include_usage {
                            queue.push_back(frame.usage(tally.prompt, tally.completion));
                        }
                        queue.push_back("data: [DONE]\n\n".into());
                    }
                    let next = queue.pop_front().expect("just queued");
                    return Some((Ok(next), (frame, events, guard, queue, tally, true)));
                }
            }
        });
    ([(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")], Body::from_stream(stream))
        .into_response()
}
