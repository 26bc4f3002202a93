//! VAGEN's visual-reasoning rewards without a judge: the agent's `<observation>` is compared
//! with the environment's own description of the state before the move (grounding), its
//! `<prediction>` with the description after it (world modeling), by the F1 of their word
//! multisets. As in VAGEN, only turns whose format was right earn them.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use vagen_sdk::export_reward;
use vagen_sdk::reward::{Judge, Reward, Turn, TurnScore};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Weight of the grounding term (VAGEN's `grounding_reward_weight`).
    pub grounding_weight: f64,
    /// Weight of the world-modeling term.
    pub worldmodeling_weight: f64,
    /// An F1 at or above this pays the full weight; below, nothing (VAGEN's judge says YES
    /// or NO); 0 pays the F1 itself.
    pub threshold: f64,
}

impl Default for Config {
    fn default() -> Self {
        Config { grounding_weight: 0.5, worldmodeling_weight: 0.5, threshold: 0.0 }
    }
}

pub struct StateMatch(Config);

impl Reward for StateMatch {
    type Config = Config;

    fn new(c: Config) -> Result<Self, String> {
        for (name, v) in [("grounding_weight", c.grounding_weight), ("worldmodeling_weight", c.worldmodeling_weight)] {
            if !v.is_finite() {
                return Err(format!("{name} must be a finite number, not {v}"));
            }
        }
        if !(0.0..=1.0).contains(&c.threshold) {
            return Err(format!("threshold {} is not in [0, 1]", c.threshold));
        }
        Ok(StateMatch(c))
    }

    fn score(&mut self, turns: &[Turn], _judge: &dyn Judge) -> Vec<Result<TurnScore, String>> {
        turns.iter().map(|t| Ok(self.turn(t))).collect()
    }
}

impl StateMatch {
    fn turn(&self, t: &Turn) -> TurnScore {
        let c = &self.0;
        let paid = |said: &Option<String>, truth: &str| -> f64 {
            let Some(said) = said else { return 0.0 };
            let f1 = f1(said, truth);
            if c.threshold > 0.0 { f64::from(u8::from(f1 >= c.threshold)) } else { f1 }
        };
        let (grounding, world) = (paid(&t.observation, &t.state_before), paid(&t.prediction, &t.state_after));
        let reward = if t.format_ok { c.grounding_weight * grounding + c.worldmodeling_weight * world } else { 0.0 };
        TurnScore::new(reward).with("grounding", grounding).with("worldmodeling", world)
    }
}

/// Lower-case words of letters and digits.
fn words(text: &str) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for w in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        *counts.entry(w.to_lowercase()).or_insert(0) += 1;
    }
    counts
}

/// F1 of two word multisets (1 when both are empty).
pub fn f1(said: &str, truth: &str) -> f64 {
    let (a, b) = (words(said), words(truth));
    let (na, nb) = (a.values().sum::<usize>(), b.values().sum::<usize>());
    if na == 0 && nb == 0 {
        return 1.0;
    }
    let common: usize = a.iter().map(|(w, &n)| n.min(*b.get(w).unwrap_or(&0))).sum();
    if common == 0 {
        return 0.0;
    }
    let (p, r) = (common as f64 / na as f64, common as f64 / nb as f64);
    2.0 * p * r / (p + r)
}

export_reward!(StateMatch);

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(observation: Option<&str>, prediction: Option<&str>, format_ok: bool) -> Turn {
        Turn {
            observation: observation.map(str::to_string),
            prediction: prediction.map(str::to_string),
            format_ok,
            state_before: "The goal is 2 rows below you. Holes next to you: Left.".into(),
            state_after: "The goal is 1 row below you.".into(),
            ..Turn::default()
        }
    }

    #[test]
    fn exact_descriptions_earn_the_weights_and_a_wrong_format_nothing() {
        let r = StateMatch::new(Config::default()).unwrap();
        let t = turn(
            Some("the goal is 2 rows below you. holes next to you: left"),
            Some("The goal is 1 row below you"),
            true,
        );
        let s = r.turn(&t);
        assert!((s.reward - 1.0).abs() < 1e-12, "{s:?}");
        assert_eq!(r.turn(&Turn { format_ok: false, ..t }).reward, 0.0);
        let none = r.turn(&turn(None, Some("elsewhere entirely"), true));
        assert_eq!(none.reward, 0.0);
    }

    #[test]
    fn a_threshold_pays_all_or_nothing() {
        let r = StateMatch::new(Config { threshold: 0.8, ..Config::default() }).unwrap();
        let close = r.turn(&turn(Some("The goal is 2 rows below you. Holes next to you: Right."), None, true));
        assert_eq!(close.reward, 0.5, "F1 ≥ 0.8 on grounding only: {close:?}");
        assert!(StateMatch::new(Config { threshold: 2.0, ..Config::default() }).is_err());
    }

    #[test]
    fn f1_counts_repeated_words() {
        assert_eq!(f1("a a b", "a b b"), 2.0 / 3.0);
        assert_eq!(f1("", ""), 1.0);
        assert_eq!(f1("x", ""), 0.0);
    }
}
