//! Critic-free estimators: a trajectory's score (sum of rewards), normalised within its
//! group (grpo), within the batch (brpo), or raw (reinforce), broadcast over its mask.

use crate::Trajectory;
use crate::stats::{mean, std};
use std::collections::BTreeMap;

/// Per-trajectory (mean, std) of scores over the trajectories sharing a key. A key with a
/// single trajectory gets (0, 1), as verl does, so the advantage is the raw score.
pub(crate) fn keyed_stats(scores: &[f64], keys: &[u64]) -> Vec<(f64, f64)> {
    let mut by_key: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for (&k, &s) in keys.iter().zip(scores) {
        by_key.entry(k).or_default().push(s);
    }
    let stats: BTreeMap<u64, (f64, f64)> =
        by_key.into_iter().map(|(k, v)| (k, if v.len() == 1 { (0.0, 1.0) } else { (mean(&v), std(&v)) })).collect();
    keys.iter().map(|k| stats[k]).collect()
}

/// (score − mean) / (std + ε) per trajectory over `keys` (score − mean with no `epsilon`:
/// mean-only, as Dr. GRPO); `None` keys means raw scores.
pub(crate) fn normalised_scores(trajs: &[Trajectory], keys: Option<&[u64]>, epsilon: Option<f64>) -> Vec<f64> {
    let scores: Vec<f64> = trajs.iter().map(Trajectory::score).collect();
    match keys {
        None => scores,
        Some(keys) => {
            keyed_stats(&scores, keys).iter().zip(&scores).map(|(&(m, s), &x)| scale(x - m, s, epsilon)).collect()
        }
    }
}

/// A deviation divided by std + ε, or left as it is with no ε (mean-only normalisation).
pub(crate) fn scale(deviation: f64, std: f64, epsilon: Option<f64>) -> f64 {
    epsilon.map_or(deviation, |e| deviation / (std + e))
}
