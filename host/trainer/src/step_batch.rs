//! One step's data as typed columns, built once from the rollouts and extended by each phase
//! (verl's `DataProto`, with a type per column): `collect` fills the token, sequence and
//! turn columns, `score` adds [`ScoreColumns`], `assign_credit` adds [`CreditColumns`].
//! Nothing is copied into another shape on the way: the estimators read column slices
//! ([`StepBatch::algo_trajectory`]) and micro-batches are index lists into the sequences.
//!
//! A new per-token column goes in [`TokenColumns`] (or in the phase's own struct when a
//! phase computes it), a per-turn one in [`TurnColumns`], and both are filled in
//! [`StepBatch::push`]; the micro-batch tensors read them in `micro.rs`.

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};
use std::ops::Range;
use std::sync::Arc;
use vagen_algo::{GroupStats, Trajectory as AlgoTrajectory};
use vagen_rollout::{AnswerOrigin, TrainingSequence, TurnRecord};
use vagen_runtime::Image;

/// Per token, every sequence end to end: sequence k holds `StepBatch::tokens_of(k)`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TokenColumns {
    pub ids: Vec<u32>,
    /// Assistant tokens: what the policy loss trains on.
    pub loss_mask: Vec<bool>,
    /// Tokens in the advantage recursion (as VAGEN: the loss mask).
    pub adv_mask: Vec<bool>,
    /// Generation's log-prob of each sampled token; 0 elsewhere and for answers without
    /// tokens (oracle, forced).
    pub sampled_logprobs: Vec<f32>,
    /// In a turn the model sampled (so `sampled_logprobs` is the behaviour policy's there).
    pub by_model: Vec<bool>,
    /// Each turn's reward (env + format) on its last token, or the episode's on the last
    /// kept turn (`rollout.rewards`).
    pub rewards: Vec<f64>,
}

/// Per sequence.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SeqColumns {
    /// Token offsets, one more than there are sequences.
    pub token_start: Vec<usize>,
    /// Offsets into the turn columns, one more than there are sequences.
    pub turn_start: Vec<usize>,
    /// The trajectory of the rollout it was laid out from.
    pub episode: Vec<usize>,
    /// Its group: the episodes of one seed.
    pub group: Vec<u64>,
    pub seed: Vec<u64>,
    /// Turns past `rollout.max_sequence_tokens` were dropped from its end.
    pub truncated: Vec<bool>,
    /// The images its tokens show, in order (raw RGB, shared with the trajectory): what a
    /// vision model's processor turns into pixel values. Empty for a text-only model, and
    /// for another rank's sequences (they never leave the rank that played them).
    #[serde(skip)]
    pub images: Vec<Vec<Arc<Image>>>,
    /// Tokens its images take.
    pub image_tokens: Vec<usize>,
}

/// Per kept turn, in sequence order (sequence k's turns are `StepBatch::turns_of(k)`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TurnColumns {
    /// Its last token, counted from its sequence's start.
    pub end: Vec<usize>,
    /// Its number in its episode.
    pub index: Vec<usize>,
    /// What the turn was paid in all (`env_reward + format_reward`), and its parts.
    pub reward: Vec<f64>,
    pub env_reward: Vec<f64>,
    pub format_reward: Vec<f64>,
    /// The key of the state it acted in (GiGPO's anchor states).
    pub state: Vec<u64>,
    pub origin: Vec<AnswerOrigin>,
}

/// What `score` adds: the policy as it sampled, the KL reference, the critic.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ScoreColumns {
    /// Per token: the log-prob the update's ratio starts from.
    pub old_logprobs: Vec<f32>,
    /// Per token, with a KL penalty.
    pub ref_logprobs: Option<Vec<f32>>,
    /// Per token (the value of acting at it), with a critic.
    pub values: Option<Vec<f64>>,
}

/// What `assign_credit` adds.
#[derive(Debug, Clone, Default)]
pub struct CreditColumns {
    /// Per token, 0 outside the advantage mask.
    pub advantages: Vec<f32>,
    /// Per token: the critic's targets.
    pub returns: Vec<f32>,
    /// Per token: where the value loss trains.
    pub value_mask: Vec<bool>,
    /// Per sequence: whether filtering kept it for the update.
    pub keep: Vec<bool>,
    pub before: GroupStats,
    pub after: GroupStats,
    /// Sequences the group filter kept but `drop_zero_advantage` left out.
    pub zero_dropped: usize,
}

/// Serialised (data-parallel ranks exchange batches) without its credit, which every rank
/// computes itself from the whole batch.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StepBatch {
    pub tokens: TokenColumns,
    pub seqs: SeqColumns,
    pub turns: TurnColumns,
    pub scores: Option<ScoreColumns>,
    #[serde(skip)]
    pub credit: Option<CreditColumns>,
}

/// Where a sequence came from: its trajectory (index, group, seed) and its kept turns.
pub struct Source<'a> {
    pub episode: usize,
    pub group: u64,
    pub seed: u64,
    /// The turns laid out in the sequence, with their number in the episode.
    pub turns: Vec<(usize, &'a TurnRecord)>,
}

impl StepBatch {
    pub fn new() -> Self {
        StepBatch {
            seqs: SeqColumns { token_start: vec![0], turn_start: vec![0], ..Default::default() },
            ..Default::default()
        }
    }

    pub fn len(&self) -> usize {
        self.seqs.episode.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends one laid-out sequence; `source.turns` are the turns it kept, in order.
    pub fn push(&mut self, seq: TrainingSequence, source: Source) {
        debug_assert_eq!(seq.turn_ends.len(), source.turns.len(), "one turn end per kept turn");
        let t = &mut self.tokens;
        t.ids.extend(&seq.ids);
        t.loss_mask.extend(&seq.loss_mask);
        t.adv_mask.extend(&seq.advantage_mask);
        t.sampled_logprobs.extend(&seq.logprobs);
        // A turn's tokens run from the previous turn's end to its own (the first from the
        // sequence's start).
        let mut start = 0;
        for (&end, (_, turn)) in seq.turn_ends.iter().zip(&source.turns) {
            t.by_model.extend(std::iter::repeat_n(turn.origin == AnswerOrigin::Model, end + 1 - start));
            start = end + 1;
        }
        t.by_model.extend(std::iter::repeat_n(false, seq.ids.len() - start));
        t.rewards.extend(seq.rewards.iter().map(|&r| r as f64));
        let s = &mut self.seqs;
        s.token_start.push(t.ids.len());
        s.episode.push(source.episode);
        s.group.push(source.group);
        s.seed.push(source.seed);
        s.truncated.push(seq.truncated);
        s.images.push(seq.images);
        s.image_tokens.push(seq.image_tokens);
        let u = &mut self.turns;
        for (&end, (index, turn)) in seq.turn_ends.iter().zip(&source.turns) {
            u.end.push(end);
            u.index.push(*index);
            u.reward.push(turn.reward);
            u.env_reward.push(turn.env_reward);
            u.format_reward.push(turn.format_reward);
            u.state.push(turn.state_key());
            u.origin.push(turn.origin);
        }
        s.turn_start.push(u.end.len());
    }

    /// Appends `other`'s sequences after this batch's, their episode numbers moved up by
    /// `episodes` (another rank's batch, in rank order). Score columns are kept only when
    /// both have them, or one of the two is empty.
    pub fn append(&mut self, other: StepBatch, episodes: usize) -> Result<()> {
        let (tokens, turns) = (self.tokens.ids.len(), self.turns.end.len());
        let scores = match (self.scores.take(), other.scores) {
            (Some(mut a), Some(b)) => {
                a.old_logprobs.extend(b.old_logprobs);
                a.ref_logprobs = join(a.ref_logprobs, b.ref_logprobs, "reference log-probs")?;
                a.values = join(a.values, b.values, "values")?;
                Some(a)
            }
            (None, None) => None,
            (Some(a), None) if other.tokens.ids.is_empty() => Some(a),
            (None, Some(b)) if tokens == 0 => Some(b),
            _ => bail!("one batch has scores and the other not: both must have gone through `score`"),
        };
        let (t, o) = (&mut self.tokens, other.tokens);
        t.ids.extend(o.ids);
        t.loss_mask.extend(o.loss_mask);
        t.adv_mask.extend(o.adv_mask);
        t.sampled_logprobs.extend(o.sampled_logprobs);
        t.by_model.extend(o.by_model);
        t.rewards.extend(o.rewards);
        let (s, o) = (&mut self.seqs, other.seqs);
        s.token_start.extend(o.token_start.iter().skip(1).map(|&i| i + tokens));
        s.turn_start.extend(o.turn_start.iter().skip(1).map(|&i| i + turns));
        s.episode.extend(o.episode.iter().map(|&e| e + episodes));
        s.group.extend(o.group);
        s.seed.extend(o.seed);
        s.truncated.extend(o.truncated);
        let n = o.image_tokens.len();
        s.images.extend(o.images.into_iter().chain(std::iter::repeat_with(Vec::new)).take(n));
        s.image_tokens.extend(o.image_tokens);
        let (u, o) = (&mut self.turns, other.turns);
        u.end.extend(o.end);
        u.index.extend(o.index);
        u.reward.extend(o.reward);
        u.env_reward.extend(o.env_reward);
        u.format_reward.extend(o.format_reward);
        u.state.extend(o.state);
        u.origin.extend(o.origin);
        self.scores = scores;
        Ok(())
    }

    /// Sequence k's span in the token columns.
    pub fn tokens_of(&self, k: usize) -> Range<usize> {
        self.seqs.token_start[k]..self.seqs.token_start[k + 1]
    }

    /// Sequence k's span in the turn columns.
    pub fn turns_of(&self, k: usize) -> Range<usize> {
        self.seqs.turn_start[k]..self.seqs.turn_start[k + 1]
    }

    /// Whether any turn of sequence k was written by `origin`.
    pub fn has_origin(&self, k: usize, origin: AnswerOrigin) -> bool {
        self.turns.origin[self.turns_of(k)].contains(&origin)
    }

    /// Assistant tokens of sequence k.
    pub fn loss_tokens(&self, k: usize) -> usize {
        self.tokens.loss_mask[self.tokens_of(k)].iter().filter(|&&m| m).count()
    }

    /// Takes the turns written by `origin` out of the loss (their tokens still shape the
    /// context of later turns).
    pub fn mask_out(&mut self, origin: AnswerOrigin) {
        for k in 0..self.len() {
            let base = self.seqs.token_start[k];
            let mut start = base;
            for u in self.turns_of(k) {
                let end = base + self.turns.end[u];
                if self.turns.origin[u] == origin {
                    self.tokens.loss_mask[start..=end].iter_mut().for_each(|m| *m = false);
                }
                start = end + 1;
            }
        }
    }

    /// Sequences in runs that share a trajectory: `(episode, sequences)` in order.
    pub fn episodes(&self) -> Vec<(usize, Range<usize>)> {
        let mut out: Vec<(usize, Range<usize>)> = Vec::new();
        for (k, &e) in self.seqs.episode.iter().enumerate() {
            match out.last_mut() {
                Some((last, r)) if *last == e => r.end = k + 1,
                _ => out.push((e, k..k + 1)),
            }
        }
        out
    }

    /// Sequence k as the estimators read it: slices of the columns, values from `score`
    /// (zeros without a critic: pass a slice of them as `zeros`).
    pub fn algo_trajectory<'a>(&'a self, k: usize, zeros: &'a [f64]) -> AlgoTrajectory<'a> {
        let r = self.tokens_of(k);
        let u = self.turns_of(k);
        let values = self.scores.as_ref().and_then(|s| s.values.as_deref());
        AlgoTrajectory {
            rewards: &self.tokens.rewards[r.clone()],
            values: values.map_or(&zeros[..r.len()], |v| &v[r.clone()]),
            loss_mask: &self.tokens.loss_mask[r.clone()],
            adv_mask: &self.tokens.adv_mask[r],
            turn_ends: &self.turns.end[u.clone()],
            group: self.seqs.group[k],
            turn_states: &self.turns.state[u],
        }
    }

    /// The scores, or an error naming the phase order.
    pub fn scores(&self) -> Result<&ScoreColumns> {
        match &self.scores {
            Some(s) => Ok(s),
            None => bail!("the batch has no scores: `score` runs before this phase"),
        }
    }

    /// The credit columns, or an error naming the phase order.
    pub fn credit(&self) -> Result<&CreditColumns> {
        match &self.credit {
            Some(c) => Ok(c),
            None => bail!("the batch has no advantages: `assign_credit` runs before this phase"),
        }
    }
}

/// Two optional score columns appended; one missing where the other is not is an error.
fn join<T>(a: Option<Vec<T>>, b: Option<Vec<T>>, what: &str) -> Result<Option<Vec<T>>> {
    match (a, b) {
        (Some(mut a), Some(b)) => {
            a.extend(b);
            Ok(Some(a))
        }
        (None, None) => Ok(None),
        _ => bail!("one batch has {what} and the other not"),
    }
}

/// Index lists of `seqs` in runs of at most `rows` sequences and, when `tokens` > 0, at
/// most `tokens` padded tokens (rows × the longest): the micro-batches of a mini-batch. A
/// sequence longer than the budget goes alone.
pub fn split(batch: &StepBatch, seqs: &[usize], rows: usize, tokens: usize) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut longest = 0;
    for &k in seqs {
        let n = batch.tokens_of(k).len();
        let fits =
            |cur: &Vec<usize>| cur.len() < rows.max(1) && (tokens == 0 || (cur.len() + 1) * longest.max(n) <= tokens);
        match out.last_mut() {
            Some(cur) if fits(cur) => {
                cur.push(k);
                longest = longest.max(n);
            }
            _ => {
                out.push(vec![k]);
                longest = n;
            }
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use vagen_rollout::Parsed;

    pub(crate) fn turn(observation: &str, reward: f64, origin: AnswerOrigin) -> TurnRecord {
        TurnRecord {
            user: observation.into(),
            observation: observation.into(),
            images: vec![],
            response: String::new(),
            origin,
            token_ids: None,
            logprobs: None,
            versions: None,
            parsed: Parsed::default(),
            answer: String::new(),
            env_reward: reward,
            format_reward: 0.0,
            reward,
            done: false,
            success: false,
            valid_actions: 1,
            effective_actions: 1,
            metrics: vec![],
            state_before: None,
            state_after: None,
            component_rewards: vec![],
        }
    }

    /// `prompt` prompt tokens then `answer` answer tokens per turn, the reward on each end.
    pub(crate) fn sequence(turns: &[&TurnRecord], prompt: usize, answer: usize) -> TrainingSequence {
        let mut seq = TrainingSequence::default();
        for t in turns {
            let mask = std::iter::repeat_n(false, prompt).chain(std::iter::repeat_n(true, answer));
            seq.loss_mask.extend(mask);
            seq.ids.extend((0..prompt + answer).map(|i| i as u32 + 1));
            seq.logprobs.extend(std::iter::repeat_n(0.0, prompt).chain(std::iter::repeat_n(-0.5, answer)));
            seq.rewards.extend(std::iter::repeat_n(0.0, prompt + answer));
            *seq.rewards.last_mut().unwrap() = t.reward as f32;
            seq.turn_ends.push(seq.ids.len() - 1);
        }
        seq.advantage_mask = seq.loss_mask.clone();
        seq
    }

    #[test]
    fn columns_line_up_and_noisy_turns_leave_the_loss() {
        let (a, b) = (turn("s0", 1.0, AnswerOrigin::Oracle), turn("s1", 2.0, AnswerOrigin::Noisy));
        let mut batch = StepBatch::new();
        batch.push(sequence(&[&a, &b], 2, 3), Source { episode: 4, group: 1, seed: 9, turns: vec![(0, &a), (1, &b)] });
        batch.push(sequence(&[&a], 1, 1), Source { episode: 5, group: 1, seed: 9, turns: vec![(0, &a)] });
        assert_eq!(batch.len(), 2);
        assert_eq!(batch.tokens_of(0), 0..10);
        assert_eq!(batch.tokens_of(1), 10..12);
        assert_eq!(batch.turns.end, vec![4, 9, 1]);
        assert_eq!(batch.turns.index, vec![0, 1, 0]);
        assert_eq!(batch.tokens.rewards[4], 1.0);
        assert_eq!(batch.tokens.rewards[9], 2.0);
        assert_eq!((batch.turns.env_reward[1], batch.turns.format_reward[1]), (2.0, 0.0), "the parts beside the sum");
        assert!(batch.has_origin(0, AnswerOrigin::Noisy) && !batch.has_origin(1, AnswerOrigin::Noisy));
        let zeros = vec![0.0; 16];
        let view = batch.algo_trajectory(0, &zeros);
        assert_eq!((view.turn_ends, view.rewards.len(), view.group), (&[4, 9][..], 10, 1));
        assert_eq!(view.turn_states.len(), 2);

        batch.mask_out(AnswerOrigin::Noisy);
        assert_eq!(batch.loss_tokens(0), 3, "the noisy second turn's answer is no target");
        assert_eq!(&batch.tokens.loss_mask[..5], &[false, false, true, true, true]);
        assert_eq!(batch.loss_tokens(1), 1);
        assert_eq!(batch.episodes(), vec![(4, 0..1), (5, 1..2)]);
        assert!(batch.scores().is_err() && batch.credit().is_err(), "phases not run yet");
    }

    #[test]
    fn micro_batches_keep_to_rows_and_the_token_budget() {
        let t = turn("s", 0.0, AnswerOrigin::Model);
        let mut batch = StepBatch::new();
        for len in [4, 4, 8, 2, 20, 2] {
            batch.push(
                sequence(&[&t], len / 2, len / 2),
                Source { episode: 0, group: 0, seed: 0, turns: vec![(0, &t)] },
            );
        }
        let all: Vec<usize> = (0..6).collect();
        assert_eq!(split(&batch, &all, 4, 0), vec![vec![0, 1, 2, 3], vec![4, 5]], "rows only");
        // 16 padded tokens: [4, 4] = 8, + 8 → 3 × 8 = 24 > 16; [8, 2] = 16; 20 alone; 2.
        assert_eq!(split(&batch, &all, 4, 16), vec![vec![0, 1], vec![2, 3], vec![4], vec![5]]);
        assert_eq!(split(&batch, &[5, 3], 1, 0), vec![vec![5], vec![3]], "in the order given");
    }
}
