//! Many environment instances stepped in parallel; one instance's fault is its own.

use crate::{Environment, Error, Observation, StepResult};
use rayon::prelude::*;

pub struct EnvPool {
    envs: Vec<Box<dyn Environment>>,
}

impl EnvPool {
    pub fn new(envs: Vec<Box<dyn Environment>>) -> Self {
        Self { envs }
    }

    pub fn len(&self) -> usize {
        self.envs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.envs.is_empty()
    }

    pub fn get_mut(&mut self, i: usize) -> &mut dyn Environment {
        self.envs[i].as_mut()
    }

    /// The envs, each to hand to a thread of the caller's (a driver that steps each episode
    /// as soon as its answer is there); [`EnvPool::new`] takes them back.
    pub fn into_envs(self) -> Vec<Box<dyn Environment>> {
        self.envs
    }

    /// Resets env `i` with `seeds[i]`, all at once.
    pub fn reset_all(&mut self, seeds: &[u64]) -> Vec<Result<Observation, Error>> {
        assert_eq!(seeds.len(), self.envs.len(), "one seed per env");
        self.envs.par_iter_mut().zip(seeds).map(|(env, &seed)| env.reset(seed)).collect()
    }

    /// Steps env `i` with `answers[i]`; `None` leaves that env alone (e.g. it is done).
    pub fn step_all(&mut self, answers: &[Option<String>]) -> Vec<Option<Result<StepResult, Error>>> {
        assert_eq!(answers.len(), self.envs.len(), "one answer slot per env");
        self.envs.par_iter_mut().zip(answers).map(|(env, answer)| answer.as_deref().map(|a| env.step(a))).collect()
    }

    /// Runs `f` on every env in parallel, e.g. a whole episode per env.
    pub fn for_each<R: Send>(&mut self, f: impl Fn(usize, &mut dyn Environment) -> R + Sync) -> Vec<R> {
        self.envs.par_iter_mut().enumerate().map(|(i, env)| f(i, env.as_mut())).collect()
    }
}
