//! One training sequence per trajectory: the chat template's text between assistant turns,
//! and each assistant turn as the token ids the policy *sampled* (not a re-tokenisation of
//! its decoded text), with the masks, turn ends and rewards the update needs.

use crate::Message;
use serde::{Deserialize, Serialize};

/// What the layout needs from a tokenizer with a chat template.
pub trait ChatTokenizer {
    fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String, String>;
    fn encode(&self, text: &str) -> Result<Vec<u32>, String>;
    fn decode(&self, ids: &[u32]) -> Result<String, String>;
    /// The token closing an assistant turn (`<|im_end|>`), when the template has one.
    fn end_of_turn(&self) -> Option<u32>;
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
}

impl Default for LayoutOptions {
    fn default() -> Self {
        LayoutOptions { max_tokens: 4096, rewards: RewardPlacement::PerTurn }
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

/// The ids to prompt a model with for its next turn: the earlier turns exactly as `layout`
/// lays them out (sampled ids kept, not re-tokenised from their text, and each message's
/// text tokenised on its own), then `user` and the generation prompt. So a model is sampled
/// on the very tokens training will score it on.
pub fn prompt_ids(
    tok: &dyn ChatTokenizer,
    system: &str,
    history: &[AssistantTurn],
    user: &str,
) -> Result<Vec<u32>, LayoutError> {
    let unlimited = LayoutOptions { max_tokens: usize::MAX, rewards: RewardPlacement::PerTurn };
    let (seq, (mut conversation, covered)) = walk(tok, system, history, &unlimited)?;
    conversation.push(Message::user(user));
    let prompt = tok.render(&conversation, true).map_err(LayoutError::Template)?;
    let delta = prompt.strip_prefix(covered.as_str()).ok_or(LayoutError::NotPrefixStable(history.len()))?;
    let mut ids = seq.ids;
    ids.extend(tok.encode(delta).map_err(LayoutError::Tokenizer)?);
    Ok(ids)
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
        let kept = seq.ids.len();
        conversation.push(Message::user(turn.user.as_str()));
        let prompt = tok.render(&conversation, true).map_err(template)?;
        let delta = prompt.strip_prefix(covered.as_str()).ok_or(LayoutError::NotPrefixStable(i))?;
        let delta_ids = tok.encode(delta).map_err(LayoutError::Tokenizer)?;
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

        if kept + delta_ids.len() + sampled.len() > options.max_tokens {
            if i == 0 {
                return Err(LayoutError::TooLong { needed: delta_ids.len() + sampled.len(), max: options.max_tokens });
            }
            seq.truncated = true;
            break;
        }
        let prompt_len = delta_ids.len();
        seq.ids.extend(delta_ids);
        seq.ids.extend(&sampled);
        seq.loss_mask.extend(std::iter::repeat_n(false, prompt_len).chain(std::iter::repeat_n(true, sampled.len())));
        seq.logprobs.extend(std::iter::repeat_n(0.0, prompt_len).chain(logprobs));
        seq.rewards.extend(std::iter::repeat_n(0.0, prompt_len + sampled.len()));
        // With nothing sampled (an empty generation) the turn ends on its prompt's last token.
        seq.turn_ends.push(seq.ids.len() - 1);
        if options.rewards == RewardPlacement::PerTurn {
            seq.rewards[seq.ids.len() - 1] += turn.reward;
        }
        covered = format!("{prompt}{}", &segment[..consumed]);
    }
    Ok((seq, (conversation, covered)))
}

/// Where the template's assistant segment ends its turn: just after the end-of-turn
/// token's text, or the whole segment when there is none.
fn end_of_turn_offset(tok: &dyn ChatTokenizer, segment: &str) -> Result<usize, LayoutError> {
    let Some(eot) = tok.end_of_turn() else {
        return Ok(segment.len());
    };
    let eot_text = tok.decode(&[eot]).map_err(LayoutError::Tokenizer)?;
    Ok(segment.find(eot_text.as_str()).map_or(segment.len(), |i| i + eot_text.len()))
}
