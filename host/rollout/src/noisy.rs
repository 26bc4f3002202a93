//! The SFT data source: the env's oracle, with some answers swapped for random ones so the
//! warm start sees (and learns from) states off the expert's path.

use crate::{AnswerOrigin, Format, Policy, PolicyError, Request, Response};
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use vagen_runtime::random_answer;

/// With probability `rate`, the generator (seeded from `seed`) to draw a replacement
/// answer from; `None` keeps the policy's own.
pub(crate) fn replacement_draw(seed: u64, rate: f64) -> Option<ChaCha8Rng> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let draw = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    (draw < rate).then_some(rng)
}

pub struct NoisyOracle {
    pub format: Format,
    /// Probability that a turn's oracle answer is replaced by a random one
    /// ([`AnswerOrigin::Noisy`]: moves the episode, is not an imitation target).
    pub noise: f64,
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
            let random = replacement_draw(r.seed, self.noise).and_then(|mut rng| random_answer(&r.actions, &mut rng));
            let (answer, origin) = match random {
                Some(a) => (a, AnswerOrigin::Noisy),
                None => (r.oracle.clone().unwrap_or_default(), AnswerOrigin::Oracle),
            };
            out.push(Response::text(self.format.wrap(&answer)).by(origin));
        }
        Ok(out)
    }
}
