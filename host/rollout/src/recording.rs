//! An episode of an agent that talks to the model through chat calls (a harness: its own
//! loop, prompts and tools), recorded as training sequences. Each call's prompt is the chat
//! template's text of the messages the agent sent; when that text extends what the episode's
//! sequence already covers (the last prompt and the answer as sampled), the call continues
//! the sequence: its prompt ids are the sequence's ids, sampled ids kept, then the new text
//! tokenised, so the model is sampled on the tokens training scores it on (as
//! [`crate::prompt_ids`] does for our own rollouts). When the agent rewrote its history
//! (summaries, dropped turns), the text no longer extends it: a new sequence starts and the
//! break is counted.

use crate::layout::{ChatTokenizer, LayoutError, TrainingSequence};

/// One episode's calls, laid out as they happen.
#[derive(Debug, Default)]
pub struct Recording {
    sequences: Vec<TrainingSequence>,
    /// The text the last sequence covers: its prompts and answers as rendered and sampled.
    covered: String,
    /// A prompt given out and not yet answered.
    pending: Option<Pending>,
    /// Calls whose prompt did not extend the sequence before them.
    breaks: usize,
    /// The policy version of each answer, in order.
    versions: Vec<u64>,
}

#[derive(Debug)]
struct Pending {
    text: String,
    /// Its ids past the sequence it continues (all of them when it starts one).
    delta: Vec<u32>,
    starts_sequence: bool,
}

/// What [`Recording::finish`] gives: the sequences, the breaks, and the policy version of
/// each answer in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    pub sequences: Vec<TrainingSequence>,
    pub breaks: usize,
    pub versions: Vec<u64>,
}

impl Recording {
    pub fn new() -> Self {
        Self::default()
    }

    /// The prompt ids to sample a call's answer on, its prompt's text being `text` (the
    /// chat template's, generation prompt included). A call made while another of the same
    /// episode is unanswered is refused (an episode is one conversation at a time).
    pub fn prompt(&mut self, tok: &dyn ChatTokenizer, text: &str) -> Result<Vec<u32>, RecordingError> {
        if self.pending.is_some() {
            return Err(RecordingError::Concurrent);
        }
        let continues = !self.sequences.is_empty() && text.starts_with(self.covered.as_str());
        let delta_text = if continues { &text[self.covered.len()..] } else { text };
        let delta = tok.encode(delta_text).map_err(|e| RecordingError::Layout(LayoutError::Tokenizer(e)))?;
        let mut ids = match (continues, self.sequences.last()) {
            (true, Some(seq)) => seq.ids.clone(),
            _ => vec![],
        };
        ids.extend(&delta);
        self.pending = Some(Pending { text: text.to_string(), delta, starts_sequence: !continues });
        Ok(ids)
    }

    /// The answer sampled for the prompt just given: its ids (with the end-of-turn token when
    /// it stopped there), their log-probs, and the policy version that sampled them.
    pub fn answer(
        &mut self,
        tok: &dyn ChatTokenizer,
        sampled: &[u32],
        logprobs: &[f32],
        version: u64,
    ) -> Result<(), RecordingError> {
        let pending = self.pending.take().ok_or(RecordingError::NoPrompt)?;
        if sampled.len() != logprobs.len() {
            let turn = self.versions.len();
            return Err(RecordingError::Layout(LayoutError::LogprobCount(turn, sampled.len(), logprobs.len())));
        }
        let answer = tok.decode(sampled).map_err(|e| RecordingError::Layout(LayoutError::Tokenizer(e)))?;
        if pending.starts_sequence {
            self.breaks += usize::from(!self.sequences.is_empty());
            self.sequences.push(TrainingSequence::default());
        }
        let seq = self.sequences.last_mut().expect("a sequence to continue");
        seq.push_turn(&pending.delta, sampled, logprobs);
        self.covered = pending.text + &answer;
        self.versions.push(version);
        Ok(())
    }

    /// Takes back a prompt given out whose call failed (the client left, the engine
    /// refused it): the next call lays out as if it had not been made.
    pub fn abandon(&mut self) {
        self.pending = None;
    }

    /// The episode's sequences, each ending on its last answer's last token, with the
    /// breaks between them; a prompt left unanswered is dropped.
    pub fn finish(self) -> Recorded {
        let sequences = self
            .sequences
            .into_iter()
            .map(|mut s| {
                s.advantage_mask = s.loss_mask.clone();
                s
            })
            .collect();
        Recorded { sequences, breaks: self.breaks, versions: self.versions }
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RecordingError {
    #[error("a call of this episode is still being answered: an episode makes one call at a time")]
    Concurrent,
    #[error("an answer recorded with no prompt given")]
    NoPrompt,
    #[error(transparent)]
    Layout(LayoutError),
}
