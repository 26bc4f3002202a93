//! The one input every estimator reads.

use crate::AlgoError;

/// One trajectory as a single token sequence (system, user, assistant, user, ...).
#[derive(Clone, Copy, Debug)]
pub struct Trajectory<'a> {
    /// Reward per token; turn rewards sit on the last token of their assistant turn.
    pub rewards: &'a [f64],
    /// Critic value per token (ignored by critic-free estimators; may be all zeros).
    pub values: &'a [f64],
    /// Tokens the policy loss trains on (assistant tokens).
    pub loss_mask: &'a [bool],
    /// Tokens that take part in the advantage recursion (VAGEN: the same as `loss_mask`).
    pub adv_mask: &'a [bool],
    /// Index of the last token of each assistant turn, ascending.
    pub turn_ends: &'a [usize],
    /// Trajectories from the same seed share a group (GRPO, filtering, normalisation).
    pub group: u64,
    /// A key of the state each turn acted in (e.g. a hash of its observation), one per turn
    /// end; gigpo compares turns of a group that share a key. Other estimators ignore it
    /// (may be empty).
    pub turn_states: &'a [u64],
}

impl Trajectory<'_> {
    pub fn len(&self) -> usize {
        self.rewards.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rewards.is_empty()
    }

    /// The sum of the trajectory's rewards.
    pub fn score(&self) -> f64 {
        self.rewards.iter().sum()
    }

    pub(crate) fn validate(&self, i: usize) -> Result<(), AlgoError> {
        let n = self.rewards.len();
        for (field, got) in
            [("values", self.values.len()), ("loss_mask", self.loss_mask.len()), ("adv_mask", self.adv_mask.len())]
        {
            if got != n {
                return Err(AlgoError::LengthMismatch { trajectory: i, field, got, expected: n });
            }
        }
        for (field, xs) in [("reward", self.rewards), ("value", self.values)] {
            if let Some((p, &v)) = xs.iter().enumerate().find(|(_, v)| !v.is_finite()) {
                return Err(AlgoError::NotFinite { trajectory: i, field, position: p, value: v });
            }
        }
        let mut prev = None;
        for &e in self.turn_ends {
            let problem = if e >= n {
                Some("past the end of the trajectory")
            } else if !self.adv_mask[e] {
                Some("outside the advantage mask")
            } else if prev.is_some_and(|p| e <= p) {
                Some("not after the previous turn end")
            } else {
                None
            };
            if let Some(problem) = problem {
                return Err(AlgoError::BadTurnEnd { trajectory: i, position: e, problem });
            }
            prev = Some(e);
        }
        if let Some((p, &r)) = self.rewards.iter().enumerate().find(|&(p, &r)| r != 0.0 && !self.adv_mask[p]) {
            return Err(AlgoError::RewardOutsideMask { trajectory: i, position: p, reward: r });
        }
        Ok(())
    }

    /// Advantage-mask positions of each turn: `(previous end, end]`.
    pub(crate) fn turns(&self, i: usize) -> Result<Vec<Vec<usize>>, AlgoError> {
        let mut turns = Vec::with_capacity(self.turn_ends.len());
        let mut start = 0;
        for &e in self.turn_ends {
            turns.push((start..=e).filter(|&p| self.adv_mask[p]).collect());
            start = e + 1;
        }
        if let Some(p) = (start..self.len()).find(|&p| self.adv_mask[p]) {
            return Err(AlgoError::TokenAfterLastTurn { trajectory: i, position: p });
        }
        Ok(turns)
    }
}
