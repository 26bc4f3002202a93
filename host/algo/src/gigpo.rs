//! GiGPO (group-in-group policy optimisation, Feng et al. 2025): the trajectory's score
//! normalised in its group, plus a step-level term that compares turns of the same group
//! that acted in the same state ("anchor states"): each turn's discounted return from that
//! turn on, normalised among the turns sharing its state. Critic-free, yet a turn that walked
//! into a hole is scored against the other answers given in that very state, not against
//! whole episodes that mostly agree with it.

use crate::group::{keyed_stats, normalised_scores, scale};
use crate::{Advantages, AlgoError, Trajectory};

pub(crate) struct Params {
    /// Discount of the step-level return, per turn.
    pub gamma: f64,
    /// Weight of the step-level term (ω).
    pub step_weight: f64,
    /// Added to the std; `None`: mean-only normalisation at both levels.
    pub epsilon: Option<f64>,
}

/// Per trajectory, each turn's advantage over that turn's advantage-mask tokens; critic-free,
/// so returns = advantages.
pub(crate) fn advantages(batch: &[Trajectory], p: &Params) -> Result<Vec<Advantages>, AlgoError> {
    let groups: Vec<u64> = batch.iter().map(|t| t.group).collect();
    let episode = normalised_scores(batch, Some(&groups), p.epsilon);

    // Every turn of the batch, flattened: its discounted return and its anchor key.
    let mut returns = Vec::new();
    let mut anchors = Vec::new();
    let mut keys: std::collections::BTreeMap<(u64, u64), u64> = Default::default();
    let mut positions = Vec::with_capacity(batch.len());
    for (i, t) in batch.iter().enumerate() {
        if t.turn_states.len() != t.turn_ends.len() {
            return Err(AlgoError::LengthMismatch {
                trajectory: i,
                field: "turn_states (one per turn end, for gigpo)",
                got: t.turn_states.len(),
                expected: t.turn_ends.len(),
            });
        }
        let turns = t.turns(i)?;
        let rewards: Vec<f64> = turns.iter().map(|ps| ps.iter().map(|&p| t.rewards[p]).sum()).collect();
        let mut g = 0.0;
        let mut back: Vec<f64> = rewards
            .iter()
            .rev()
            .map(|r| {
                g = r + p.gamma * g;
                g
            })
            .collect();
        back.reverse();
        returns.extend(back);
        positions.push(turns);
        for &s in t.turn_states {
            let next = keys.len() as u64;
            anchors.push(*keys.entry((t.group, s)).or_insert(next));
        }
    }
    // A state visited once has nothing to be compared with: its step term is 0.
    let mut visits = vec![0usize; keys.len()];
    anchors.iter().for_each(|&a| visits[a as usize] += 1);
    let stats = keyed_stats(&returns, &anchors);
    let mut step = (0..returns.len()).map(|k| {
        let (m, s) = stats[k];
        if visits[anchors[k] as usize] < 2 { 0.0 } else { scale(returns[k] - m, s, p.epsilon) }
    });

    Ok(batch
        .iter()
        .zip(episode)
        .zip(positions)
        .map(|((t, e), turns)| {
            let mut advantages = vec![0.0; t.len()];
            for tokens in turns {
                let a = e + p.step_weight * step.next().expect("one per turn");
                tokens.iter().for_each(|&k| advantages[k] = a);
            }
            Advantages { returns: advantages.clone(), advantages, value_mask: vec![false; t.len()] }
        })
        .collect())
}
