//! RAGEN's two-armed bandit: arm names hint at their payouts; one pull per episode.

use serde::{Deserialize, Serialize};
use vagen_sdk::{Env, EnvError, Manifest, Observation, Rng, Step, echo, export_env};

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The steady arm's name.
    pub low_arm: String,
    /// The risky arm's name.
    pub high_arm: String,
    /// What the steady arm always pays (RAGEN code 0.1, paper 0.15).
    pub low_reward: f64,
    /// What the risky arm pays when it pays.
    pub high_reward: f64,
    /// How often the risky arm pays.
    pub high_probability: f64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            low_arm: "Phoenix".into(),
            high_arm: "Dragon".into(),
            low_reward: 0.1,
            high_reward: 1.0,
            high_probability: 0.25,
        }
    }
}

pub struct Bandit {
    config: Config,
    /// Arm names in the order shown this episode.
    shown: [String; 2],
    rng: Rng,
}

impl Env for Bandit {
    type Config = Config;

    fn new(config: Config) -> Result<Self, EnvError> {
        let bad = |m: String| Err(EnvError::BadConfig(m));
        if config.low_arm.trim().is_empty() || config.high_arm.trim().is_empty() {
            return bad("arm names must not be blank".into());
        }
        if config.low_arm.trim().eq_ignore_ascii_case(config.high_arm.trim()) {
            return bad("low_arm and high_arm must differ".into());
        }
        if !(0.0..=1.0).contains(&config.high_probability) {
            return bad(format!("high_probability must be in [0, 1], got {}", config.high_probability));
        }
        if !config.low_reward.is_finite() || !config.high_reward.is_finite() {
            return bad("rewards must be finite".into());
        }
        let shown = [config.low_arm.clone(), config.high_arm.clone()];
        Ok(Self { config, shown, rng: Rng::new(0) })
    }

    fn manifest() -> Manifest {
        let c = Config::default();
        Manifest {
            action_names: vec![c.low_arm, c.high_arm],
            default_max_turns: 1,
            has_oracle: true,
            ..Manifest::default()
        }
    }

    fn reset(&mut self, seed: u64) -> Observation {
        self.rng = Rng::new(seed);
        self.shown = [self.config.low_arm.clone(), self.config.high_arm.clone()];
        self.rng.shuffle(&mut self.shown);
        Observation::text(format!(
            "Two slot machines stand before you: {} and {}. Which one do you pull?",
            self.shown[0], self.shown[1]
        ))
    }

    fn step(&mut self, answer: &str) -> Step {
        let c = &self.config;
        let choice = answer.trim();
        let (low, high) =
            (choice.eq_ignore_ascii_case(c.low_arm.trim()), choice.eq_ignore_ascii_case(c.high_arm.trim()));
        let mut step = Step { done: true, success: high, ..Step::default() };
        let text = if low {
            step.reward = c.low_reward;
            format!("You pulled {} and won {}.", c.low_arm, c.low_reward)
        } else if high {
            step.reward = if self.rng.chance(c.high_probability) { c.high_reward } else { 0.0 };
            format!("You pulled {} and won {}.", c.high_arm, step.reward)
        } else {
            format!(
                "{:?} is not a machine here; the choices were {} and {}.",
                echo(choice),
                self.shown[0],
                self.shown[1]
            )
        };
        step.valid_actions = u32::from(low || high);
        step.effective_actions = step.valid_actions;
        step.observation = Observation::text(text);
        step
    }

    fn system_prompt(&self) -> String {
        format!(
            "You are playing a bandit game.\n\
             Goal: win as much as you can with a single pull.\n\
             Rules:\n\
             1. There are two arms, {a} and {b}.\n\
             2. Each arm has its own payout distribution, and its name hints at how it behaves.\n\
             3. Think about what each name symbolises, and pull the arm you expect to pay more on average.\n\
             Answer with the arm's name, {a} or {b}.",
            a = self.config.low_arm,
            b = self.config.high_arm,
        )
    }

    fn describe_state(&self) -> String {
        let c = &self.config;
        format!(
            "{} pays {} with probability {}; {} always pays {}. {} is better on average.",
            c.high_arm,
            c.high_reward,
            c.high_probability,
            c.low_arm,
            c.low_reward,
            if c.high_reward * c.high_probability >= c.low_reward { &c.high_arm } else { &c.low_arm }
        )
    }

    fn oracle(&self) -> Option<String> {
        Some(self.config.high_arm.clone())
    }
}

export_env!(Bandit);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payouts_follow_the_config() {
        let mut env = Bandit::new(Config::default()).unwrap();
        let (mut high_total, n) = (0.0, 4000);
        for seed in 0..n {
            env.reset(seed);
            let s = env.step(" dragon ");
            assert!(s.done && s.success);
            high_total += s.reward;
            env.reset(seed);
            let s = env.step("Phoenix");
            assert!(s.done && !s.success && s.reward == 0.1);
        }
        let rate = high_total / n as f64;
        assert!((0.22..0.28).contains(&rate), "risky arm paid {rate} on average");
        env.reset(0);
        let s = env.step("Unicorn");
        assert!(s.done && !s.success && s.valid_actions == 0 && s.reward == 0.0);
    }

    #[test]
    fn arm_order_depends_on_the_seed() {
        let mut env = Bandit::new(Config::default()).unwrap();
        let firsts: std::collections::HashSet<String> =
            (0..20).map(|s| env.reset(s).text.split(": ").nth(1).unwrap().to_string()).collect();
        assert_eq!(firsts.len(), 2, "both orders appear");
        assert_eq!(env.reset(3), env.reset(3));
    }

    #[test]
    fn bad_configs_are_rejected() {
        let same = Config { high_arm: "phoenix".into(), ..Config::default() };
        assert!(matches!(Bandit::new(same), Err(EnvError::BadConfig(m)) if m.contains("differ")));
        let p = Config { high_probability: 1.5, ..Config::default() };
        assert!(matches!(Bandit::new(p), Err(EnvError::BadConfig(m)) if m.contains("high_probability")));
    }
}
