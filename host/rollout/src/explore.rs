//! Exploration for RL rollouts: some turns' answers replaced by one random action.
//!
//! A policy that is confidently wrong in a state (FrozenLake: stepping into a hole the
//! state description names) samples the same answer in every episode of its group at
//! temperature 1, so group-relative estimators see no difference to learn from. A forced
//! alternative in a few of those episodes gives the group one.

use crate::noisy::replacement_draw;
use crate::{AnswerOrigin, Format, Policy, PolicyError, Request, Response};
use rand_core::Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Keeps the draws apart from the model's own sampling, which also derives from the
/// request seed.
const SALT: u64 = 0x5EED_E8F1_0EA7_0001;

/// Which answers `rollout.explore`'s probability applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExploreAt {
    /// Every turn on its own.
    #[default]
    Turn,
    /// Once per state that several episodes of a group are in at the same turn: one of
    /// them is diverted. Aimed at GiGPO's anchor states, where a group that all answers
    /// alike has nothing to compare.
    SharedState,
}

pub struct Exploring<P> {
    pub inner: P,
    pub format: Format,
    /// Probability that a turn's answer (or one answer per shared state) is replaced.
    pub rate: f64,
    pub at: ExploreAt,
}

impl<P: Policy> Policy for Exploring<P> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn needs_oracle(&self) -> bool {
        self.inner.needs_oracle()
    }
    fn begin_rollout(&mut self) {
        self.inner.begin_rollout()
    }
    fn respond(&mut self, requests: &[Request]) -> Result<Vec<Response>, PolicyError> {
        let picks = match self.at {
            ExploreAt::Turn => self.per_turn(requests),
            ExploreAt::SharedState => self.per_shared_state(requests),
        };
        // The model generates only for the turns it keeps.
        let generated = if picks.iter().all(Option::is_none) {
            self.inner.respond(requests)?
        } else {
            let kept: Vec<Request> =
                requests.iter().zip(&picks).filter(|(_, p)| p.is_none()).map(|(r, _)| r.clone()).collect();
            if kept.is_empty() { Vec::new() } else { self.inner.respond(&kept)? }
        };
        let mut generated = generated.into_iter();
        let mut out = Vec::with_capacity(requests.len());
        for pick in picks {
            out.push(match pick {
                Some(action) => Response::text(self.format.wrap(action)).by(AnswerOrigin::Forced),
                // The inner policy answered too few: the driver reports the count.
                None => match generated.next() {
                    Some(response) => response,
                    None => break,
                },
            });
        }
        Ok(out)
    }
}

impl<P> Exploring<P> {
    fn per_turn<'r>(&self, requests: &'r [Request]) -> Vec<Option<&'r String>> {
        requests
            .iter()
            .map(|r| {
                let actions = &r.actions.action_names;
                if actions.is_empty() {
                    return None;
                }
                replacement_draw(r.seed ^ SALT, self.rate).map(|mut rng| one_of(&mut rng, actions))
            })
            .collect()
    }

    /// Requests of one group in the same state (GiGPO's anchor key); with probability
    /// `rate`, one of them (drawn) gets a random action.
    fn per_shared_state<'r>(&self, requests: &'r [Request]) -> Vec<Option<&'r String>> {
        let mut states: BTreeMap<(usize, u64), Vec<usize>> = BTreeMap::new();
        for (k, r) in requests.iter().enumerate() {
            states.entry((r.group, r.state)).or_default().push(k);
        }
        let mut picks = vec![None; requests.len()];
        for members in states.values().filter(|m| m.len() > 1) {
            let first = &requests[members[0]];
            let actions = &first.actions.action_names;
            if actions.is_empty() {
                continue;
            }
            if let Some(mut rng) = replacement_draw(first.seed ^ SALT, self.rate) {
                let who = *one_of(&mut rng, members);
                picks[who] = Some(one_of(&mut rng, actions));
            }
        }
        picks
    }
}

/// A uniform draw from a non-empty slice.
fn one_of<'a, T>(rng: &mut impl Rng, items: &'a [T]) -> &'a T {
    &items[(rng.next_u64() % items.len() as u64) as usize]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::Arc;
    use vagen_runtime::Manifest;

    /// Always answers "Up", as a confident policy would; counts the turns it was asked.
    struct Up(usize);
    impl Policy for Up {
        fn name(&self) -> &'static str {
            "up"
        }
        fn respond(&mut self, requests: &[Request]) -> Result<Vec<Response>, PolicyError> {
            self.0 += requests.len();
            Ok(requests.iter().map(|_| Response::text("<answer>Up</answer>").by(AnswerOrigin::Model)).collect())
        }
    }

    fn requests(n: usize) -> Vec<Request> {
        let manifest = Arc::new(Manifest {
            action_names: ["Left", "Down", "Right", "Up"].map(String::from).to_vec(),
            ..Manifest::default()
        });
        (0..n).map(|i| Request { seed: 1000 + i as u64, ..crate::policy::test_request(i, &manifest) }).collect()
    }

    /// The indices of the answers with a forced origin.
    fn forced_of(out: &[Response]) -> HashSet<usize> {
        (0..out.len()).filter(|&i| out[i].origin == AnswerOrigin::Forced).collect()
    }

    fn explore(rate: f64, n: usize) -> (Vec<Response>, HashSet<usize>) {
        let mut p = Exploring { inner: Up(0), format: Format::NoThink, rate, at: ExploreAt::Turn };
        let out = p.respond(&requests(n)).unwrap();
        let forced = forced_of(&out);
        assert_eq!(p.inner.0, n - forced.len(), "the model generates only the turns it keeps");
        assert!(out.iter().all(|r| matches!(r.origin, AnswerOrigin::Model | AnswerOrigin::Forced)));
        (out, forced)
    }

    #[test]
    fn forced_answers_are_one_random_action_at_the_given_rate_and_reproducible() {
        let (none, forced) = explore(0.0, 200);
        assert!(forced.is_empty());
        assert!(none.iter().all(|r| r.text == "<answer>Up</answer>"));

        let (out, forced) = explore(0.25, 2000);
        let share = forced.len() as f64 / 2000.0;
        assert!((0.2..0.3).contains(&share), "forced share {share}");
        let mut seen = HashSet::new();
        for (i, r) in out.iter().enumerate() {
            if forced.contains(&i) {
                assert!(r.token_ids.is_none() && r.logprobs.is_none(), "a forced answer has no sampled tokens");
                let action = r.text.strip_prefix("<answer>").and_then(|t| t.strip_suffix("</answer>")).unwrap();
                assert!(["Left", "Down", "Right", "Up"].contains(&action), "{}", r.text);
                seen.insert(action.to_string());
            } else {
                assert_eq!(r.text, "<answer>Up</answer>");
            }
        }
        assert_eq!(seen.len(), 4, "every action is drawn: {seen:?}");
        assert_eq!(explore(0.25, 2000), (out, forced), "the same seeds force the same answers");
    }

    #[test]
    fn one_answer_per_shared_state_is_diverted_and_lone_states_are_left_alone() {
        let manifest = Arc::new(Manifest { action_names: vec!["Left".into(), "Right".into()], ..Manifest::default() });
        // Two groups of 4: group 0 all in state 1; group 1 in 2, 2, 3, and 1 (the same key
        // as group 0's, but another group's map).
        let states = [1, 1, 1, 1, 2, 2, 3, 1];
        let requests: Vec<Request> = states
            .iter()
            .enumerate()
            .map(|(i, &state)| Request {
                group: i / 4,
                turn: 3,
                state,
                seed: 77 + i as u64,
                ..crate::policy::test_request(i, &manifest)
            })
            .collect();
        let mut p = Exploring { inner: Up(0), format: Format::NoThink, rate: 1.0, at: ExploreAt::SharedState };
        let out = p.respond(&requests).unwrap();
        let mut forced: Vec<usize> = forced_of(&out).into_iter().collect();
        forced.sort();
        assert_eq!(forced.len(), 2, "one in group 0's A, one in group 1's B: {forced:?}");
        assert!(forced[0] < 4 && (4..6).contains(&forced[1]), "{forced:?}");
        assert_eq!(p.inner.0, 6, "the model answers only the turns not diverted");
        for (i, r) in out.iter().enumerate() {
            assert_eq!(r.text == "<answer>Up</answer>", !forced.contains(&i), "{i}: {}", r.text);
        }
        p.rate = 0.0;
        assert!(forced_of(&p.respond(&requests).unwrap()).is_empty());
    }
}
