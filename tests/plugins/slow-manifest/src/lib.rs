//! `get-manifest` spins forever: loading must end in a timeout, not a hang.

use vagen_sdk::{Env, EnvError, Manifest, NoConfig, Observation, Step, export_env};

pub struct Slow;

impl Env for Slow {
    type Config = NoConfig;
    fn new(_: NoConfig) -> Result<Self, EnvError> {
        Ok(Slow)
    }
    fn manifest() -> Manifest {
        let mut x = 1u64;
        loop {
            x = std::hint::black_box(x.wrapping_mul(3));
        }
    }
    fn reset(&mut self, _: u64) -> Observation {
        Observation::text("")
    }
    fn step(&mut self, _: &str) -> Step {
        Step::default()
    }
}

export_env!(Slow);
