//! The generation worker: owns the engine, takes jobs in between its steps, streams each
//! token as it is sampled, and answers a job once all its choices ended. A recorded
//! episode's call ([`crate::EpisodeBook`]) is laid out by its recording instead of being
//! tokenised afresh, and its answer recorded.

use crate::episodes::EpisodeBook;
use crate::request::PixelHold;
use crate::stream;
use crate::tokens::{TokenText, answer_text, token_text};
use crate::tools;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use vagen_model::{
    Chat, ChatAnswer, ChatError, Engine, EngineOptions, EngineRequest, FinishReason, GenerateOptions, Image, Message,
    Model, RequestId, StepOutput, Tokenizer, ToolCall,
};
use vagen_policy::ChatModel;

/// One request's completions to generate: one per seed.
pub(crate) struct Job {
    pub messages: Vec<Message>,
    pub images: Vec<Image>,
    pub max_tokens: usize,
    pub temperature: f64,
    pub top_p: f64,
    pub stop: Vec<String>,
    pub seeds: Vec<u64>,
    /// Alternatives per position to return (`top_logprobs`).
    pub top_logprobs: usize,
    /// Draws among the k most likely tokens only (0: all).
    pub top_k: usize,
    pub tools: tools::ToolUse,
    /// The served adapter (0: the base).
    pub adapter: usize,
    pub reply: Replier,
    /// Set when the client left: its rows stop at the next decode step.
    pub gone: Arc<AtomicBool>,
    /// The pictures' share of the server's pixel budget, held until the job is done.
    pub pixels: Option<PixelHold>,
    /// The worker's step count when the request was queued.
    pub arrived: usize,
    /// The recorded episode the call belongs to (its id in the [`EpisodeBook`]).
    pub episode: Option<String>,
}

/// Where a job's answer goes: whole, or token by token.
pub(crate) enum Replier {
    Whole(tokio::sync::oneshot::Sender<Reply>),
    Stream(tokio::sync::mpsc::UnboundedSender<stream::Event>),
}

/// A request's completions, or why there are none.
pub(crate) type Reply = Result<Vec<Answer>, String>;

/// One completion.
pub(crate) struct Answer {
    /// Its text (before its tool calls, when it has any).
    pub text: String,
    pub calls: Vec<ToolCall>,
    /// It ends as `tool_calls` ([`tools::ToolUse::ends_in_calls`]).
    pub ends_in_calls: bool,
    pub finish: FinishReason,
    pub prompt_tokens: usize,
    pub token_ids: Vec<u32>,
    /// Each sampled token's text and bytes, for `logprobs`.
    pub tokens: Vec<TokenText>,
    pub logprobs: Vec<f32>,
    /// At each position, the `top_logprobs` most likely tokens and their log-probs.
    pub top: Vec<Vec<(TokenText, f32)>>,
    /// The bytes of a character the answer was cut inside (`text` leaves them out).
    pub partial: Option<Vec<u8>>,
}

/// What `/stats` reports, kept by the worker as it steps.
#[derive(Default)]
pub(crate) struct Counters {
    pub requests: AtomicUsize,
    /// Times the engine started from idle.
    pub rounds: AtomicUsize,
    /// Engine steps run.
    pub steps: AtomicUsize,
    /// Rows decoded together at most.
    pub peak_batch: AtomicUsize,
    /// The most steps any request waited from being queued to its first token (the step
    /// that sampled it included).
    pub max_steps_to_first_token: AtomicUsize,
}

/// A server's generation side, to run on the thread that may use the model (libtorch's
/// tensors may not be shared between threads): [`Worker::run`] answers the server's
/// requests until every route holding its queue is gone.
pub struct Worker {
    pub(crate) queue: mpsc::Receiver<Job>,
    pub(crate) max_batch: NonZeroUsize,
    pub(crate) wait: Duration,
    pub(crate) kv_cache_mib: NonZeroUsize,
    pub(crate) trim_memory: bool,
    pub(crate) counters: Arc<Counters>,
    pub(crate) episodes: Option<Arc<EpisodeBook>>,
}

impl Worker {
    /// Answers requests with `model` until the server is dropped (its routes hold the other
    /// end of the queue) and the last request has ended.
    pub fn run(self, model: &Model) {
        let engine = Engine::new(EngineOptions {
            max_batch: self.max_batch,
            kv_cache_mib: self.kv_cache_mib,
            ..Default::default()
        });
        let running = Running {
            model,
            engine,
            max_batch: self.max_batch.get(),
            wait: self.wait,
            counters: self.counters,
            episodes: self.episodes,
            trim_memory: self.trim_memory,
            jobs: std::collections::HashMap::new(),
            rows: std::collections::HashMap::new(),
            next_job: 0,
            next_key: 0,
        };
        running.run(self.queue);
    }
}

/// The worker's state while it runs.
struct Running<'m> {
    model: &'m Model,
    engine: Engine,
    max_batch: usize,
    wait: Duration,
    counters: Arc<Counters>,
    episodes: Option<Arc<EpisodeBook>>,
    trim_memory: bool,
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

impl Running<'_> {
    fn run(mut self, queue: mpsc::Receiver<Job>) {
        loop {
            if self.engine.pending() == 0 {
                self.engine.clear();
                if self.trim_memory {
                    give_back_memory();
                }
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
            let stepped = self.engine.step(self.model);
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
            top_k: job.top_k,
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
            let request = match &flight.job.episode {
                Some(episode) => self.episode_request(episode, chat),
                None => self.model.chat_request(chat, self.next_key),
            };
            let submitted = request.and_then(|request| {
                let tokens = request.ids.len();
                let id = self.engine.submit(self.model, request, &options);
                let id = id.map_err(|e| ChatError::Prompt(e.to_string()));
                // A prompt its recording gave out and the engine refused is taken back (a
                // refused recording, e.g. a second call at once, gave none out).
                if let (Err(_), Some(episode), Some(book)) = (&id, &flight.job.episode, &self.episodes) {
                    book.abandon(episode);
                }
                id.map(|id| (id, tokens))
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
            let answer = match &flight.job.episode {
                Some(episode) => record(self.episodes.as_deref(), episode, self.model, generation, prompt_tokens),
                None => Ok(ChatAnswer { generation, prompt_tokens }),
            };
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
                    if let (Some(episode), Some(book)) = (&flight.job.episode, &self.episodes) {
                        book.abandon(episode);
                    }
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

    /// The engine request of a recorded episode's call: laid out by its recording (the
    /// episode's sequence continued when the prompt extends it), sampled as the episode's
    /// trajectory so the engine keeps its cache from the call before.
    fn episode_request(&self, episode: &str, chat: &Chat) -> Result<EngineRequest, ChatError> {
        let book = self.episodes.as_deref().expect("episode jobs come from a server with episodes");
        let text = self.model.chat_text(chat).map_err(|e| ChatError::Prompt(e.to_string()))?;
        let asked = chat.messages.last().map(|m| m.content.clone()).unwrap_or_default();
        let call = book.prompt(episode, &ChatModel(self.model), &text, asked).map_err(ChatError::Prompt)?;
        Ok(EngineRequest {
            key: call.key,
            ids: call.ids,
            images: vec![],
            max_new_tokens: chat.max_tokens.min(call.room),
            seed: chat.seed.unwrap_or(call.key),
            adapter: 0,
        })
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

/// A recorded episode's answer: into its recording (a cancelled one taken back).
fn record(
    book: Option<&EpisodeBook>,
    episode: &str,
    model: &Model,
    generation: vagen_model::Generation,
    prompt_tokens: usize,
) -> Result<ChatAnswer, ChatError> {
    let book = book.expect("episode jobs come from a server with episodes");
    if generation.finish == FinishReason::Cancelled {
        book.abandon(episode);
        return Ok(ChatAnswer { generation, prompt_tokens });
    }
    book.answer(episode, &ChatModel(model), &generation).map_err(ChatError::Generation)?;
    Ok(ChatAnswer { generation, prompt_tokens })
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
