//! Chats answered together (`Model::answer_chats`): prompts rendered by the chat template,
//! capped to the context, one batched generation. The local judge (reward functions' judge
//! requests through the rollout engine) and `vagen-host serve` both answer this way.

use crate::{Engine, EngineOptions, EngineRequest, GenerateOptions, Generation, IMAGE_MARKER, Image, Message, Model};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use vagen_runtime::reward::{Judge, JudgePart, JudgeRequest};

/// A model answering judge requests; its own device and weights, never trained.
pub struct LocalJudge {
    inner: Mutex<Inner>,
    calls: AtomicUsize,
    requests: AtomicUsize,
}

struct Inner {
    model: Model,
    engine: Engine,
}

impl LocalJudge {
    pub fn new(model: Model) -> crate::Result<Self> {
        let engine = Engine::new(EngineOptions::default())?;
        Ok(LocalJudge { inner: Mutex::new(Inner { model, engine }), calls: 0.into(), requests: 0.into() })
    }

    /// Generation calls made so far (one per distinct temperature in a judge call).
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// Requests answered so far.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

/// A request's messages as the chat template takes them: images as `<image>` markers.
fn messages(r: &JudgeRequest) -> (Vec<Message>, Vec<Image>) {
    let mut images = vec![];
    let messages = r
        .messages
        .iter()
        .map(|m| {
            let mut text = String::new();
            for part in &m.content {
                match part {
                    JudgePart::Text(t) => text.push_str(t),
                    JudgePart::Image(i) => {
                        text.push_str(IMAGE_MARKER);
                        images.push(i.clone());
                    }
                }
            }
            Message::new(m.role.as_str(), text)
        })
        .collect();
    (messages, images)
}

/// A seed from the prompt: the same request draws the same answer.
fn seed_of(ids: &[u32]) -> u64 {
    ids.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &t| (h ^ t as u64).wrapping_mul(0x1000_0000_01b3))
}

/// One conversation to continue.
pub struct Chat {
    pub messages: Vec<Message>,
    /// The images of the messages' `<image>` markers, in order.
    pub images: Vec<Image>,
    /// Tokens to generate at most (fewer when the context has less room).
    pub max_tokens: usize,
    /// Its draws; `None`: drawn from the prompt, so the same chat gets the same answer.
    pub seed: Option<u64>,
}

pub struct ChatAnswer {
    pub generation: Generation,
    pub prompt_tokens: usize,
}

/// Why a chat got no answer.
#[derive(Debug, Clone)]
pub enum ChatError {
    /// Its prompt could not be built (a bad template input, images for a text model, no room
    /// left in the context).
    Prompt(String),
    /// The generation failed (for every chat of the call).
    Generation(String),
}

impl std::fmt::Display for ChatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChatError::Prompt(e) | ChatError::Generation(e) => f.write_str(e),
        }
    }
}

/// What `answer_chats` did: an answer or error per chat, and how many chats were generated.
pub struct Answered {
    pub answers: Vec<Result<ChatAnswer, ChatError>>,
    pub generated: usize,
}

impl Model {
    /// Answers `chats` in one generation with `options`' sampling (its `max_new_tokens` and
    /// seed are each chat's own). Unrelated conversations: the engine keeps nothing between
    /// calls.
    pub fn answer_chats(&self, engine: &mut Engine, chats: &[Chat], options: &GenerateOptions) -> Answered {
        let mut answers: Vec<Result<ChatAnswer, ChatError>> = Vec::with_capacity(chats.len());
        let mut batch = vec![];
        let mut which = vec![];
        for (i, chat) in chats.iter().enumerate() {
            let prompt = self.encode_chat_images(&chat.messages, &chat.images, true).map_err(|e| e.to_string());
            let prompt = prompt.and_then(|p| {
                let room = self.config().max_position_embeddings.saturating_sub(p.ids.len());
                if room == 0 {
                    Err(format!("the prompt's {} tokens fill the context", p.ids.len()))
                } else {
                    Ok((p, room))
                }
            });
            match prompt {
                Ok((p, room)) => {
                    let seed = chat.seed.unwrap_or_else(|| seed_of(&p.ids));
                    let max_new_tokens = chat.max_tokens.max(1).min(room);
                    batch.push(EngineRequest { key: i as u64, ids: p.ids, images: p.images, max_new_tokens, seed });
                    which.push(i);
                    answers.push(Err(ChatError::Generation(String::new())));
                }
                Err(e) => answers.push(Err(ChatError::Prompt(e))),
            }
        }
        if batch.is_empty() {
            return Answered { answers, generated: 0 };
        }
        let longest = batch.iter().map(|r| r.max_new_tokens).max().unwrap_or(1);
        let options = GenerateOptions { max_new_tokens: longest, ..options.clone() };
        engine.clear();
        let prompt_tokens: Vec<usize> = batch.iter().map(|r| r.ids.len()).collect();
        match self.generate_with(engine, &batch, &options) {
            Ok(generations) => {
                for ((i, generation), prompt_tokens) in which.iter().zip(generations).zip(prompt_tokens) {
                    answers[*i] = Ok(ChatAnswer { generation, prompt_tokens });
                }
            }
            Err(e) => {
                for &i in &which {
                    answers[i] = Err(ChatError::Generation(e.to_string()));
                }
            }
        }
        Answered { answers, generated: which.len() }
    }
}

impl Judge for LocalJudge {
    fn complete(&self, requests: &[JudgeRequest]) -> Vec<Result<String, String>> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let Inner { model, engine } = &mut *inner;
        let mut out: Vec<Result<String, String>> = vec![Err(String::new()); requests.len()];
        // One generation per temperature (a reward function's requests share one).
        let mut temperatures: Vec<u64> = requests.iter().map(|r| r.temperature.to_bits()).collect();
        temperatures.sort_unstable();
        temperatures.dedup();
        for bits in temperatures {
            let which: Vec<usize> =
                (0..requests.len()).filter(|&i| requests[i].temperature.to_bits() == bits).collect();
            let chats: Vec<Chat> = which
                .iter()
                .map(|&i| {
                    let (messages, images) = messages(&requests[i]);
                    Chat { messages, images, max_tokens: requests[i].max_tokens as usize, seed: None }
                })
                .collect();
            let options = GenerateOptions { temperature: f64::from_bits(bits), ..Default::default() };
            let answered = model.answer_chats(engine, &chats, &options);
            if answered.generated > 0 {
                self.calls.fetch_add(1, Ordering::SeqCst);
                self.requests.fetch_add(answered.generated, Ordering::SeqCst);
            }
            for (&i, answer) in which.iter().zip(answered.answers) {
                out[i] = match answer {
                    Ok(a) => Ok(a.generation.text),
                    Err(ChatError::Prompt(e)) => Err(format!("the local judge cannot read this request: {e}")),
                    Err(ChatError::Generation(e)) => Err(format!("the local judge failed: {e}")),
                };
            }
        }
        out
    }

    fn counts(&self) -> Vec<(&'static str, usize)> {
        vec![("calls", self.calls()), ("requests", self.requests())]
    }
}
