//! Chats answered together (`Model::answer_chats`): prompts rendered by the chat template,
//! capped to the context, one batched generation. `vagen-host serve` and the local judge
//! (`vagen-policy`) both answer this way.

use crate::{Engine, EngineRequest, GenerateOptions, Generation, Image, Message, Model};

/// Bytes of text tokenised at a time by [`Model::past_the_context`].
const PIECE_BYTES: usize = 4096;

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
    /// The served adapter that answers it (0: the model as it is).
    pub adapter: usize,
    /// Tools offered to the model, as the client sent them (rendered by the chat template,
    /// [`crate::ChatTemplate::render_chat`]).
    pub tools: Vec<serde_json::Value>,
    /// Text the answer starts with, written after the generation prompt (a forced tool
    /// call's opening): part of the prompt, not sampled.
    pub answer_prefix: String,
}

impl Chat {
    /// A conversation to continue with no tools and nothing forced.
    pub fn new(messages: Vec<Message>, images: Vec<Image>, max_tokens: usize, seed: Option<u64>) -> Self {
        Chat { messages, images, max_tokens, seed, adapter: 0, tools: Vec::new(), answer_prefix: String::new() }
    }
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
    /// Refuses messages whose text alone has more tokens than the context holds, counted a
    /// piece at a time and stopping once past it: a prompt of megabytes costs a few pieces'
    /// tokenisation, not its whole (nor the memory that takes). Pieces end at whitespace, so
    /// their counts add up to about the whole's; each cut may add a token, hence the margin.
    /// The tools offered and the calls' arguments count as text too.
    fn past_the_context(&self, chat: &Chat) -> crate::Result<()> {
        let window = self.config().max_position_embeddings;
        let (mut tokens, mut pieces) = (0, 0);
        let tools: Vec<String> = chat.tools.iter().map(serde_json::Value::to_string).collect();
        let texts = chat
            .messages
            .iter()
            .flat_map(|m| std::iter::once(m.content.as_str()).chain(m.tool_calls.iter().map(|c| c.arguments.as_str())));
        for text in texts.chain(tools.iter().map(String::as_str)) {
            let mut rest = text;
            while !rest.is_empty() {
                let mut end = rest.len().min(PIECE_BYTES);
                while !rest.is_char_boundary(end) {
                    end -= 1;
                }
                if end < rest.len() {
                    end = rest[..end].rfind(char::is_whitespace).filter(|&w| w > 0).unwrap_or(end);
                }
                tokens += self.tokenizer.encode(&rest[..end])?.len();
                pieces += 1;
                rest = &rest[end..];
                if tokens > window + 2 * pieces {
                    return Err(crate::Error::Invalid(format!(
                        "the prompt has more than {window} tokens (the context's) in its first {} KiB",
                        (text.len() - rest.len()).div_ceil(1024)
                    )));
                }
            }
        }
        Ok(())
    }

    /// `chat`'s prompt: its messages and tools rendered by the chat template, the generation
    /// prompt, then its answer's prefix.
    pub fn chat_prompt(&self, chat: &Chat) -> crate::Result<crate::Prompt> {
        let text = self.chat_text(chat)?;
        self.encode_rendered(&text, &chat.images)
    }

    /// The text of `chat`'s prompt ([`Self::chat_prompt`] before it is tokenised), refused
    /// when its messages alone are past the context.
    pub fn chat_text(&self, chat: &Chat) -> crate::Result<String> {
        self.past_the_context(chat)?;
        let template = self.chat_template()?;
        let mut text = template.render_chat(&chat.messages, &chat.tools, self.vision.is_some(), true)?;
        text.push_str(&chat.answer_prefix);
        Ok(text)
    }

    /// The engine request that continues `chat` as trajectory `key`: its prompt rendered by
    /// the chat template, its cap within the context's room, its seed (drawn from the
    /// prompt when the chat has none).
    pub fn chat_request(&self, chat: &Chat, key: u64) -> Result<EngineRequest, ChatError> {
        let prompt = self.chat_prompt(chat);
        let prompt = prompt.map_err(|e| ChatError::Prompt(e.to_string()))?;
        let room = self.config().max_position_embeddings.saturating_sub(prompt.ids.len());
        if room == 0 {
            return Err(ChatError::Prompt(format!("the prompt's {} tokens fill the context", prompt.ids.len())));
        }
        let seed = chat.seed.unwrap_or_else(|| seed_of(&prompt.ids));
        Ok(EngineRequest {
            key,
            ids: prompt.ids,
            images: prompt.images,
            max_new_tokens: chat.max_tokens.max(1).min(room),
            seed,
            adapter: chat.adapter,
        })
    }

    /// Answers `chats` in one generation with `options`' sampling (its `max_new_tokens` and
    /// seed are each chat's own). Unrelated conversations: the engine keeps nothing between
    /// calls.
    pub fn answer_chats(&self, engine: &mut Engine, chats: &[Chat], options: &GenerateOptions) -> Answered {
        let mut answers: Vec<Result<ChatAnswer, ChatError>> = Vec::with_capacity(chats.len());
        let mut batch = vec![];
        let mut which = vec![];
        for (i, chat) in chats.iter().enumerate() {
            match self.chat_request(chat, i as u64) {
                Ok(request) => {
                    batch.push(request);
                    which.push(i);
                    answers.push(Err(ChatError::Generation(String::new())));
                }
                Err(e) => answers.push(Err(e)),
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
