//! Which weights sampled a batch's tokens: the measure of `[async]` staleness, gathered over
//! ranks (`data_parallel`) and reported per step (`async/staleness`).

use vagen_rollout::Trajectory;

/// The weights' versions of the tokens a model sampled in a batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TokenVersions {
    pub tokens: usize,
    /// The versions summed (their mean is `sum / tokens`).
    pub sum: f64,
    pub oldest: Option<usize>,
}

impl TokenVersions {
    /// Over the sampled tokens of `trajs`; a turn that records no versions was sampled by
    /// `version` whole.
    pub fn of(trajs: &[Trajectory], version: usize) -> Self {
        let mut v = TokenVersions::default();
        for turn in trajs.iter().flat_map(|t| &t.turns) {
            let Some(ids) = &turn.token_ids else { continue };
            let each: Vec<usize> = match &turn.versions {
                Some(vs) => vs.iter().map(|&x| x as usize).collect(),
                None => vec![version; ids.len()],
            };
            v.add(&TokenVersions {
                tokens: each.len(),
                sum: each.iter().sum::<usize>() as f64,
                oldest: each.iter().copied().min(),
            });
        }
        v
    }

    pub fn add(&mut self, o: &TokenVersions) {
        self.tokens += o.tokens;
        self.sum += o.sum;
        self.oldest = match (self.oldest, o.oldest) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// Updates between the tokens' weights and `now`'s: the mean over tokens, and the
    /// largest (0 without tokens).
    pub fn staleness(&self, now: usize) -> (f64, usize) {
        if self.tokens == 0 {
            return (0.0, 0);
        }
        (now as f64 - self.sum / self.tokens as f64, now - self.oldest.unwrap_or(now).min(now))
    }
}
