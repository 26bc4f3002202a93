//! RAGEN's reward normalisation of trajectory scores, before they are placed on tokens.

use crate::AlgoError;
use crate::stats::{mean, std};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NormMethod {
    Identity,
    /// x − mean.
    Mean,
    /// (x − mean) / (std + 1e-6).
    MeanStd,
    /// mean-std, then clipped to [−1, 3].
    AsymClip,
}

/// Normalises `scores` within the sets `keys` defines (RAGEN's groupings: pass seed-group
/// ids, env-tag ids, or all zeros for the batch). Std is the sample std; a set of one has std 0.
pub fn normalize_scores(scores: &[f64], keys: &[u64], method: NormMethod) -> Result<Vec<f64>, AlgoError> {
    if keys.len() != scores.len() {
        return Err(AlgoError::CountMismatch { what: "keys", got: keys.len(), expected: scores.len() });
    }
    if method == NormMethod::Identity {
        return Ok(scores.to_vec());
    }
    // Unlike grpo, a set of one is not special-cased: it normalises to 0.
    let mut sets: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for (&k, &s) in keys.iter().zip(scores) {
        sets.entry(k).or_default().push(s);
    }
    let stats: BTreeMap<u64, (f64, f64)> = sets.into_iter().map(|(k, v)| (k, (mean(&v), std(&v)))).collect();
    Ok(scores
        .iter()
        .zip(keys)
        .map(|(&x, k)| {
            let (m, s) = stats[k];
            match method {
                NormMethod::Identity => x,
                NormMethod::Mean => x - m,
                NormMethod::MeanStd => (x - m) / (s + 1e-6),
                NormMethod::AsymClip => ((x - m) / (s + 1e-6)).clamp(-1.0, 3.0),
            }
        })
        .collect())
}
