//! The one episode loop: `vagen-host run` (with or without a format), `eval` and the
//! trainer's collection all go through [`Episodes::run`]: groups of episodes through the
//! driver, in chunks whose instances live for the chunk, each chunk handed to the caller
//! as it ends (logs written as the run goes), and the [`FailurePolicy`] judged between
//! chunks and at the end.

use crate::failure::{FailurePolicy, TooManyFailures};
use crate::{EpisodeShape, Policy, RolloutConfig, RolloutError, Trajectory, rollout};
use vagen_runtime::Plugin;

pub struct Episodes<'a> {
    pub plugin: &'a dyn Plugin,
    pub env_config: &'a str,
    pub config: &'a RolloutConfig,
    pub shape: EpisodeShape,
    pub failures: FailurePolicy,
    /// Groups per driver call (0: all at once). More instances step in parallel; fewer
    /// hold less memory and let the failure rate stop a run sooner.
    pub chunk_groups: usize,
}

/// What a run gave: every episode played (in seed order) and, when more failed than the
/// policy allows, the verdict.
pub struct Outcome {
    pub trajectories: Vec<Trajectory>,
    /// Episodes asked for; more than were played when the failure rate stopped the run.
    pub requested: usize,
    pub verdict: Result<(), TooManyFailures>,
}

impl Episodes<'_> {
    /// One group of `shape.group_size` episodes per seed. `on_chunk` sees each chunk's
    /// trajectories as it ends (and may slim them: the outcome keeps what it leaves).
    pub fn run(
        &self,
        seeds: &[u64],
        policy: &mut dyn Policy,
        on_chunk: &mut dyn FnMut(&mut [Trajectory]) -> Result<(), RolloutError>,
    ) -> Result<Outcome, RolloutError> {
        let per_call = if self.chunk_groups == 0 { seeds.len().max(1) } else { self.chunk_groups };
        let (mut trajectories, mut failed) = (Vec::<Trajectory>::new(), 0);
        for (k, chunk) in seeds.chunks(per_call).enumerate() {
            let mut trajs = rollout(self.plugin, self.env_config, chunk, self.config, &self.shape, policy)?;
            for t in &mut trajs {
                t.group += k * per_call;
            }
            on_chunk(&mut trajs)?;
            failed += trajs.iter().filter(|t| t.failure.is_some()).count();
            trajectories.extend(trajs);
            let judged = trajectories.len() >= self.failures.min_episodes;
            if judged && self.failures.exceeded(failed, trajectories.len()) {
                break;
            }
        }
        let verdict = self.failures.check(&trajectories);
        let requested = seeds.len() * self.shape.group_size.get();
        Ok(Outcome { trajectories, requested, verdict })
    }
}
