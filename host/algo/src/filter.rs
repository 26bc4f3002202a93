//! StarPO-S trajectory filtering: keep the groups (same seed) whose rewards vary most,
//! where the policy still has something to learn.

use crate::AlgoError;
use crate::stats::{mean, std};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FilterKeep {
    /// The groups with the highest in-group reward std (StarPO-S).
    Top,
    /// The lowest, for ablations.
    Bottom,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FilterConfig {
    /// Fraction of groups kept, in (0, 1]; 1 keeps everything (RAGEN's default is 0.25).
    pub keep_fraction: f64,
    pub keep: FilterKeep,
    /// Also leave out each sequence whose advantage is 0 on every token (every answer in
    /// its group, or in its state, scored the same): it adds nothing to the policy gradient,
    /// only its tokens to the mean (DAPO's dynamic sampling, per sequence). Applied by the
    /// trainer, and only where no entropy bonus, KL penalty or critic would learn from it.
    pub drop_zero_advantage: bool,
}

impl Default for FilterConfig {
    fn default() -> Self {
        Self { keep_fraction: 0.25, keep: FilterKeep::Top, drop_zero_advantage: false }
    }
}

/// Averages over groups of the in-group reward std and mean.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct GroupStats {
    pub groups: usize,
    pub mean_in_group_std: f64,
    pub mean_in_group_mean: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Filtered {
    /// Per trajectory: kept for the update.
    pub keep: Vec<bool>,
    pub before: GroupStats,
    pub after: GroupStats,
}

/// Keeps `max(1, ⌊keep_fraction × groups⌋)` groups ranked by in-group std (sample std; a
/// group of one has std 0). Ties go to the smaller group id, so the choice is deterministic.
pub fn filter_groups(scores: &[f64], groups: &[u64], cfg: &FilterConfig) -> Result<Filtered, AlgoError> {
    if groups.len() != scores.len() {
        return Err(AlgoError::CountMismatch { what: "groups", got: groups.len(), expected: scores.len() });
    }
    if !(cfg.keep_fraction > 0.0 && cfg.keep_fraction <= 1.0) {
        return Err(AlgoError::BadParameter { name: "keep_fraction", value: cfg.keep_fraction, range: "(0, 1]" });
    }
    let mut sets: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for (&g, &s) in groups.iter().zip(scores) {
        sets.entry(g).or_default().push(s);
    }
    let mut ranked: Vec<(u64, f64, f64)> = sets.iter().map(|(&g, v)| (g, std(v), mean(v))).collect();
    let before = summarise(&ranked);
    // Stable sort on std alone keeps ascending group ids among ties.
    match cfg.keep {
        FilterKeep::Top => ranked.sort_by(|a, b| b.1.total_cmp(&a.1)),
        FilterKeep::Bottom => ranked.sort_by(|a, b| a.1.total_cmp(&b.1)),
    }
    let n = ((cfg.keep_fraction * ranked.len() as f64 + 1e-9).floor() as usize).clamp(1, ranked.len().max(1));
    ranked.truncate(n);
    let after = summarise(&ranked);
    let kept: Vec<u64> = ranked.iter().map(|r| r.0).collect();
    Ok(Filtered { keep: groups.iter().map(|g| kept.contains(g)).collect(), before, after })
}

fn summarise(groups: &[(u64, f64, f64)]) -> GroupStats {
    let stds: Vec<f64> = groups.iter().map(|g| g.1).collect();
    let means: Vec<f64> = groups.iter().map(|g| g.2).collect();
    GroupStats { groups: groups.len(), mean_in_group_std: mean(&stds), mean_in_group_mean: mean(&means) }
}
