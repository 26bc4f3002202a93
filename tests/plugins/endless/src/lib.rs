//! An episode that never ends, from a plugin whose manifest asks for `u32::MAX` turns and
//! whose name climbs out of any folder. `text_kib` makes every step's observation that
//! many KiB; `fail_at` fails that step (counting from 1) with an error.

use serde::{Deserialize, Serialize};
use vagen_sdk::{Env, EnvError, Manifest, Observation, Step, export_env};

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub text_kib: u32,
    pub fail_at: u32,
}

pub struct Endless {
    config: Config,
    steps: u32,
}

impl Env for Endless {
    type Config = Config;

    fn new(config: Config) -> Result<Self, EnvError> {
        Ok(Self { config, steps: 0 })
    }

    fn manifest() -> Manifest {
        Manifest {
            name: "../../../outside/pwned".into(),
            action_names: vec!["go".into()],
            default_max_turns: u32::MAX,
            ..Manifest::default()
        }
    }

    fn reset(&mut self, seed: u64) -> Observation {
        self.steps = 0;
        Observation::text(format!("seed {seed}"))
    }

    fn step(&mut self, _answer: &str) -> Step {
        self.steps += 1;
        let text = "y".repeat(self.config.text_kib as usize * 1024);
        Step { observation: Observation::text(text), valid_actions: 1, ..Step::default() }
    }

    fn try_step(&mut self, answer: &str) -> Result<Step, EnvError> {
        if self.config.fail_at == self.steps + 1 {
            return Err(EnvError::Failed(format!("step {} fails", self.steps + 1)));
        }
        Ok(self.step(answer))
    }
}

export_env!(Endless);
