//! The SFT data source: the env's oracle, with some answers swapped for random ones so the
//! warm start sees (and learns from) states off the expert's path.

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use vagen_rollout::{Format, Policy, PolicyError, Request, Response};
use vagen_runtime::random_answer;

pub struct NoisyOracle {
    pub format: Format,
    /// Probability that a turn's oracle answer is replaced by a random one.
    pub noise: f64,
    /// (trajectory, turn) pairs that got a random answer: not imitation targets.
    pub noisy: std::collections::HashSet<(usize, usize)>,
}

impl Policy for NoisyOracle {
    fn name(&self) -> &'static str {
        "noisy-oracle"
    }
    fn needs_oracle(&self) -> bool {
        true
    }
    fn respond(&mut self, requests: &[Request]) -> Result<Vec<Response>, PolicyError> {
        let mut out = Vec::with_capacity(requests.len());
        for r in requests {
            let mut rng = ChaCha8Rng::seed_from_u64(r.seed);
            let draw = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
            let random = if draw < self.noise { random_answer(&r.manifest, &mut rng) } else { None };
            if random.is_some() {
                self.noisy.insert((r.trajectory, r.turn));
            }
            let answer = random.or_else(|| r.oracle.clone()).unwrap_or_default();
            out.push(Response::text(self.format.wrap(&answer)));
        }
        Ok(out)
    }
}
