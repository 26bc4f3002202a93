//! Build: `cargo xtask plugins` → target/examples/guess-number.wasm
//! Run:   `target/release/vagen-host --plugin target/examples/guess-number.wasm --policy human`
use vagen_sdk::{Env, EnvError, Manifest, NoConfig, Observation, Rng, Step, export_env};

pub struct Guess(u32);

impl Env for Guess {
    type Config = NoConfig;
    fn new(_: NoConfig) -> Result<Self, EnvError> {
        Ok(Guess(0))
    }
    fn manifest() -> Manifest {
        let action_names = (1..=10).map(|n| n.to_string()).collect();
        Manifest { action_names, default_max_turns: 4, ..Manifest::default() }
    }
    fn reset(&mut self, seed: u64) -> Observation {
        self.0 = 1 + Rng::new(seed).below(10) as u32;
        Observation::text("I picked a number from 1 to 10. Guess it.")
    }
    fn step(&mut self, answer: &str) -> Step {
        let guess = answer.trim().parse::<u32>().ok();
        let text = match guess {
            Some(g) if g < self.0 => "Higher.",
            Some(g) if g > self.0 => "Lower.",
            Some(_) => "Correct!",
            None => "Answer with a number.",
        };
        let success = guess == Some(self.0);
        let reward = if success { 1.0 } else { 0.0 };
        Step {
            observation: Observation::text(text),
            reward,
            done: success,
            success,
            valid_actions: guess.is_some() as u32,
            ..Step::default()
        }
    }
}

export_env!(Guess);
