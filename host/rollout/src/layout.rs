//! One training sequence per trajectory: the chat template's text between assistant turns,
//! and each assistant turn as the token ids the policy *sampled* (not a re-tokenisation of
//! its decoded text), with the masks, turn ends and rewards the update needs. A vision
//! model's image placeholders are expanded here, to the tokens each image takes, so the
//! sequence's positions are the model's and its masks cover them token by token.

use crate::Message;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use vagen_runtime::Image;

/// What the layout needs from a tokenizer with a chat template.
pub trait ChatTokenizer {
    fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String, String>;
    /// [`Self::render`] with tools offered (OpenAI's `tools`, as sent), for templates that
    /// write them.
    fn render_with_tools(
        &self,
        messages: &[Message],
        tools: &[serde_json::Value],
        add_generation_prompt: bool,
    ) -> Result<String, String> {
        match tools.is_empty() {
            true => self.render(messages, add_generation_prompt),
            false => Err("this chat template takes no tools".into()),
        }
    }
    fn encode(&self, text: &str) -> Result<Vec<u32>, String>;
    fn decode(&self, ids: &[u32]) -> Result<String, String>;
    /// The token closing an assistant turn (`<|im_end|>`), when the template has one.
    fn end_of_turn(&self) -> Option<u32>;
    /// The token the template writes once per image (`<|image_pad|>`), repeated in the
    /// sequence [`Self::image_tokens`] times. `None` for a model without vision: its prompts
    /// show the `<image>` markers as text and the images are not laid out.
    fn image_pad(&self) -> Option<u32> {
        None
    }
    /// How many tokens `image` takes in the sequence.
    fn image_tokens(&self, _image: &Image) -> Result<usize, String> {
        Err("this model takes no images".into())
    }
}

/// Where rewards go in the sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RewardPlacement {
    /// Each turn's reward on that turn's last token (VAGEN's turn-level rewards).
    #[default]
    PerTurn,
    /// The trajectory's total on the last token of the last kept turn.
    Final,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LayoutOptions {
    /// Longest sequence kept. Turns that do not fit are dropped from the end, whole, and
    /// the sequence is marked `truncated`; a first turn that does not fit is an error.
    pub max_tokens: usize,
    pub rewards: RewardPlacement,
    /// Image tokens a sequence may hold (0: no limit beyond `max_tokens`). Turns past it
    /// are dropped as for length; a first turn past it is an error.
    pub max_image_tokens: usize,
}

impl Default for LayoutOptions {
    fn default() -> Self {
        LayoutOptions { max_tokens: 4096, rewards: RewardPlacement::PerTurn, max_image_tokens: 0 }
    }
}

/// One assistant turn as the policy produced it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantTurn {
    /// The user message before it (observation, feedback, reminder).
    pub user: String,
    pub response: String,
    /// Sampled ids (ending with the end-of-turn token when the policy stopped there).
    /// `None` for policies without tokens (oracle, random, scripted): then the response is
    /// tokenised and the end-of-turn token appended.
    pub token_ids: Option<Vec<u32>>,
    pub logprobs: Option<Vec<f32>>,
    pub reward: f32,
    /// The images of `user`, in `<image>` order.
    #[serde(skip)]
    pub images: Vec<Arc<Image>>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TrainingSequence {
    pub ids: Vec<u32>,
    /// True on assistant tokens (end-of-turn included): the tokens the loss covers.
    pub loss_mask: Vec<bool>,
    /// Tokens taking part in the advantage recursion (as VAGEN: the loss mask).
    pub advantage_mask: Vec<bool>,
    /// The policy's log-prob of each assistant token when it reported one, else 0.
    pub logprobs: Vec<f32>,
    pub rewards: Vec<f32>,
    /// Index of each kept turn's last token.
    pub turn_ends: Vec<usize>,
    /// Some turns were dropped for length.
    pub truncated: bool,
    /// Turns whose rendered text did not start with the response as sampled (a template
    /// that rewrites history, e.g. strips old `<think>` parts): their ids are still the
    /// sampled ones, and the text after them starts at the template's end of turn.
    pub rewritten_turns: usize,
    /// The kept turns' images in the order of their tokens (shared, not copied); empty for
    /// a model without vision.
    #[serde(skip)]
    pub images: Vec<Arc<Image>>,
    /// Tokens the images take.
    pub image_tokens: usize,
}

impl TrainingSequence {
    /// Appends a turn: its prompt's ids outside the loss, then its answer's under it with
    /// their log-probs (one each), the turn ending on the answer's last token (on the
    /// prompt's with nothing sampled, an empty generation).
    pub(crate) fn push_turn(&mut self, prompt: &[u32], answer: &[u32], logprobs: &[f32]) {
        debug_assert_eq!(answer.len(), logprobs.len(), "a log-prob per answer token");
        let n = prompt.len() + answer.len();
        self.ids.extend(prompt.iter().chain(answer));
        self.loss_mask.extend(std::iter::repeat_n(false, prompt.len()).chain(std::iter::repeat_n(true, answer.len())));
        self.logprobs.extend(std::iter::repeat_n(0.0, prompt.len()).chain(logprobs.iter().copied()));
        self.rewards.extend(std::iter::repeat_n(0.0, n));
        self.turn_ends.push(self.ids.len() - 1);
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LayoutError {
    #[error("chat template: {0}")]
    Template(String),
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("the chat template is not prefix-stable at turn {0}: rendering more messages changed the text before them")]
    NotPrefixStable(usize),
    #[error("the first turn needs {needed} tokens, more than max_tokens {max}")]
    TooLong { needed: usize, max: usize },
    #[error("turn {0}: {1} token ids but {2} log-probs")]
    LogprobCount(usize, usize, usize),
    #[error("a turn-less trajectory has nothing to train on")]
    Empty,
    #[error("turn {turn}: the chat template wrote {pads} image placeholder(s) for {images} image(s)")]
    ImageCount { turn: usize, pads: usize, images: usize },
    #[error("turn {turn}, image {image}: {message}")]
    Image { turn: usize, image: usize, message: String },
    #[error("the first turn's images take {needed} tokens, more than max_image_tokens {max}")]
    TooManyImageTokens { needed: usize, max: usize },
}

pub fn layout(
    tok: &dyn ChatTokenizer,
    system: &str,
    turns: &[AssistantTurn],
    options: &LayoutOptions,
) -> Result<TrainingSequence, LayoutError> {
    if turns.is_empty() {
        return Err(LayoutError::Empty);
    }
    let (mut seq, _) = walk(tok, system, turns, options)?;
    if options.rewards == RewardPlacement::Final {
        let total: f32 = turns.iter().map(|t| t.reward).sum();
        let last = *seq.turn_ends.last().expect("the first turn is always kept");
        seq.rewards[last] += total;
    }
    seq.advantage_mask = seq.loss_mask.clone();
    Ok(seq)
}

/// A prompt for a model's next turn: ids with every image's tokens in place, and the images.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptIds {
    pub ids: Vec<u32>,
    pub images: Vec<Arc<Image>>,
    pub image_tokens: usize,
}

/// The ids to prompt a model with for its next turn: the earlier turns exactly as `layout`
/// lays them out (sampled ids kept, not re-tokenised from their text, and each message's
/// text tokenised on its own), then `user` with its `images` and the generation prompt. So
/// a model is sampled on the very tokens training will score it on.
pub fn prompt_ids(
    tok: &dyn ChatTokenizer,
    system: &str,
    history: &[AssistantTurn],
    user: &str,
    images: &[Arc<Image>],
) -> Result<PromptIds, LayoutError> {
    let unlimited = LayoutOptions { max_tokens: usize::MAX, ..LayoutOptions::default() };
    let (seq, (mut conversation, covered)) = walk(tok, system, history, &unlimited)?;
    conversation.push(Message::user(user));
    let prompt = tok.render(&conversation, true).map_err(LayoutError::Template)?;
    let delta = prompt.strip_prefix(covered.as_str()).ok_or(LayoutError::NotPrefixStable(history.len()))?;
    let mut delta_ids = tok.encode(delta).map_err(LayoutError::Tokenizer)?;
    let added = expand_images(tok, &mut delta_ids, images, history.len())?;
    let (mut ids, mut all_images) = (seq.ids, seq.images);
    ids.extend(delta_ids);
    if added.is_some() {
        all_images.extend(images.iter().cloned());
    }
    Ok(PromptIds { ids, images: all_images, image_tokens: seq.image_tokens + added.unwrap_or(0) })
}

/// The turns laid out one after another, with the conversation and the text they cover.
fn walk(
    tok: &dyn ChatTokenizer,
    system: &str,
    turns: &[AssistantTurn],
    options: &LayoutOptions,
) -> Result<(TrainingSequence, (Vec<Message>, String)), LayoutError> {
    let template = LayoutError::Template;
    let mut seq = TrainingSequence::default();
    let mut conversation = vec![Message::system(system)];
    let mut covered = String::new();
    for (i, turn) in turns.iter().enumerate() {
        conversation.push(Message::user(turn.user.as_str()));
        let prompt = tok.render(&conversation, true).map_err(template)?;
        let delta = prompt.strip_prefix(covered.as_str()).ok_or(LayoutError::NotPrefixStable(i))?;
        let mut delta_ids = tok.encode(delta).map_err(LayoutError::Tokenizer)?;
        let image_tokens = expand_images(tok, &mut delta_ids, &turn.images, i)?;
        conversation.push(Message::assistant(turn.response.as_str()));
        let rendered = tok.render(&conversation, false).map_err(template)?;
        let segment = rendered.strip_prefix(prompt.as_str()).ok_or(LayoutError::NotPrefixStable(i))?;

        let sampled = match &turn.token_ids {
            Some(ids) => ids.clone(),
            None => {
                let mut ids = tok.encode(&turn.response).map_err(LayoutError::Tokenizer)?;
                ids.extend(tok.end_of_turn());
                ids
            }
        };
        let logprobs = match &turn.logprobs {
            Some(l) if l.len() != sampled.len() => return Err(LayoutError::LogprobCount(i, sampled.len(), l.len())),
            Some(l) => l.clone(),
            None => vec![0.0; sampled.len()],
        };
        let sampled_text = tok.decode(&sampled).map_err(LayoutError::Tokenizer)?;
        let consumed = if segment.starts_with(sampled_text.as_str()) {
            sampled_text.len()
        } else {
            seq.rewritten_turns += 1;
            end_of_turn_offset(tok, segment)?
        };

        if !room_for(&mut seq, i, delta_ids.len() + sampled.len(), image_tokens, options)? {
            break;
        }
        if let Some(n) = image_tokens {
            seq.images.extend(turn.images.iter().cloned());
            seq.image_tokens += n;
        }
        seq.push_turn(&delta_ids, &sampled, &logprobs);
        if options.rewards == RewardPlacement::PerTurn {
            seq.rewards[seq.ids.len() - 1] += turn.reward;
        }
        covered = format!("{prompt}{}", &segment[..consumed]);
    }
    Ok((seq, (conversation, covered)))
}

/// Whether turn `turn`, of `tokens` tokens (its prompt's and answer's) of which
/// `image_tokens` are images', fits after `seq` within `options`' budgets. A turn that does
/// not is dropped with those after it (`seq.truncated` set, `Ok(false)`); a first turn
/// that does not is an error.
pub(crate) fn room_for(
    seq: &mut TrainingSequence,
    turn: usize,
    tokens: usize,
    image_tokens: Option<usize>,
    options: &LayoutOptions,
) -> Result<bool, LayoutError> {
    let images_after = seq.image_tokens + image_tokens.unwrap_or(0);
    let over_images = options.max_image_tokens > 0 && images_after > options.max_image_tokens;
    if seq.ids.len() + tokens <= options.max_tokens && !over_images {
        return Ok(true);
    }
    if turn > 0 {
        seq.truncated = true;
        return Ok(false);
    }
    if over_images {
        return Err(LayoutError::TooManyImageTokens { needed: images_after, max: options.max_image_tokens });
    }
    Err(LayoutError::TooLong { needed: tokens, max: options.max_tokens })
}

/// Each image placeholder of `ids` (one per image, as the template writes it) repeated to
/// the tokens its image takes; the tokens added in all, or `None` for a model without
/// vision (nothing to expand).
pub(crate) fn expand_images(
    tok: &dyn ChatTokenizer,
    ids: &mut Vec<u32>,
    images: &[Arc<Image>],
    turn: usize,
) -> Result<Option<usize>, LayoutError> {
    let Some(pad) = tok.image_pad() else {
        return Ok(None);
    };
    let pads = ids.iter().filter(|&&t| t == pad).count();
    if pads != images.len() {
        return Err(LayoutError::ImageCount { turn, pads, images: images.len() });
    }
    if pads == 0 {
        return Ok(Some(0));
    }
    let counts = images
        .iter()
        .enumerate()
        .map(|(image, img)| tok.image_tokens(img).map_err(|message| LayoutError::Image { turn, image, message }))
        .collect::<Result<Vec<usize>, _>>()?;
    let mut next = counts.iter();
    let mut out = Vec::with_capacity(ids.len() + counts.iter().sum::<usize>());
    for &t in ids.iter() {
        match t == pad {
            true => out.extend(std::iter::repeat_n(pad, *next.next().expect("one count per placeholder"))),
            false => out.push(t),
        }
    }
    *ids = out;
    Ok(Some(counts.iter().sum()))
}

/// Where the template's assistant segment ends its turn: just after the end-of-turn
/// token's text, or the whole segment when there is none.
pub(crate) fn end_of_turn_offset(tok: &dyn ChatTokenizer, segment: &str) -> Result<usize, LayoutError> {
    let Some(eot) = tok.end_of_turn() else {
        return Ok(segment.len());
    };
    let eot_text = tok.decode(&[eot]).map_err(LayoutError::Tokenizer)?;
    Ok(segment.find(eot_text.as_str()).map_or(segment.len(), |i| i + eot_text.len()))
}
