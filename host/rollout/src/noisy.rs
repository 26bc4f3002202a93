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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use vagen_runtime::Manifest;

    #[test]
    fn noisy_answers_say_so_and_the_rest_are_the_oracles() {
        let manifest = Arc::new(Manifest { action_names: vec!["Left".into(), "Right".into()], ..Manifest::default() });
        let requests: Vec<Request> = (0..400)
            .map(|i| Request { oracle: Some("Up".into()), ..crate::policy::test_request(i, &manifest) })
            .collect();
        let out = NoisyOracle { format: Format::NoThink, noise: 0.25 }.respond(&requests).unwrap();
        let noisy = out.iter().filter(|r| r.origin == AnswerOrigin::Noisy).count();
        assert!((60..140).contains(&noisy), "{noisy} of 400 at 0.25");
        for r in &out {
            match r.origin {
                AnswerOrigin::Oracle => assert_eq!(r.text, "<answer>Up</answer>"),
                AnswerOrigin::Noisy => {
                    assert!(["<answer>Left</answer>", "<answer>Right</answer>"].contains(&r.text.as_str()))
                }
                other => panic!("{other:?}"),
            }
        }
    }
}
