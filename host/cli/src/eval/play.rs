//! The episodes an evaluation plays: (seed, sample) pairs in batches of `--parallel`, each
//! through the rollout driver, each request drawing from a seed of its own pair and turn, so
//! a pair plays the same whatever batch it lands in (a resumed run's are those of a whole
//! one), and each batch's records handed on as it ends.

use super::args::Setup;
use super::records::{EpisodeRecord, ImageDir, Settings};
use anyhow::{Context, Result};
use std::collections::BTreeSet;
use vagen_rollout::{Policy, PolicyError, Request, Response, rollout};

/// One episode to play: sample `sample` of seed `seed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Job {
    pub seed: u64,
    pub sample: usize,
}

/// Every (seed, sample) of `settings` that `done` lacks, in seed order.
pub fn jobs(settings: &Settings, done: &[EpisodeRecord]) -> Vec<Job> {
    let done: BTreeSet<(u64, usize)> = done.iter().map(|r| (r.seed, r.sample)).collect();
    (0..settings.seeds as u64)
        .flat_map(|i| (0..settings.samples).map(move |sample| Job { seed: settings.seed_start + i, sample }))
        .filter(|j| !done.contains(&(j.seed, j.sample)))
        .collect()
}

/// A request's draws: from its episode's seed and sample and its turn alone.
fn request_seed(job: Job, turn: usize) -> u64 {
    let mut x = job.seed ^ (job.sample as u64).wrapping_mul(0xD1B5_4A32_D192_ED03) ^ (turn as u64).rotate_left(32);
    // splitmix64's finaliser: nearby inputs give unrelated seeds.
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// `inner`, each request's seed its job's.
struct Seeded<'a> {
    inner: &'a mut dyn Policy,
    batch: &'a [Job],
}

impl Policy for Seeded<'_> {
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
        let seeded: Vec<Request> = requests
            .iter()
            .map(|r| Request { seed: request_seed(self.batch[r.trajectory], r.turn), ..r.clone() })
            .collect();
        self.inner.respond(&seeded)
    }
}

/// Plays `jobs`, handing each batch's records to `on_batch` as the batch ends; returns them
/// all. Progress goes to stderr (a bar, or lines when it is not a terminal).
pub fn play(
    setup: &Setup,
    settings: &Settings,
    policy: &mut dyn Policy,
    jobs: &[Job],
    images: Option<&ImageDir>,
    on_batch: &mut dyn FnMut(&[EpisodeRecord]) -> Result<()>,
) -> Result<Vec<EpisodeRecord>> {
    let mut bar = vagen_trainer::Progress::new(jobs.len() as u64, "episodes", true, 0);
    let mut wins = 0;
    let mut all = Vec::with_capacity(jobs.len());
    let shape = &setup.shape;
    for batch in jobs.chunks(setup.parallel.max(1)) {
        let started = std::time::Instant::now();
        let seeds: Vec<u64> = batch.iter().map(|j| j.seed).collect();
        let mut seeded = Seeded { inner: &mut *policy, batch };
        let trajs = rollout(setup.plugin.as_ref(), &setup.env_config, &seeds, &setup.rollout, shape, &mut seeded)
            .with_context(|| format!("playing {}", setup.plugin_path.display()))?;
        let seconds = started.elapsed().as_secs_f64();
        let records = trajs
            .iter()
            .zip(batch)
            .map(|(t, job)| {
                let r = EpisodeRecord::of(t, job.sample, &settings.model.name, images)?;
                Ok(EpisodeRecord { batch_seconds: seconds, ..r })
            })
            .collect::<Result<Vec<_>>>()?;
        on_batch(&records)?;
        wins += records.iter().filter(|r| r.success).count();
        bar.set_message(format!("{wins} won"));
        records.iter().for_each(|_| bar.inc());
        all.extend(records);
    }
    bar.finish();
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_sample_and_turn_draws_from_its_own_seed() {
        let seeds: BTreeSet<u64> = (0..4u64)
            .flat_map(|seed| {
                (0..4).flat_map(move |sample| (0..4).map(move |turn| request_seed(Job { seed, sample }, turn)))
            })
            .collect();
        assert_eq!(seeds.len(), 64);
        assert_eq!(request_seed(Job { seed: 7, sample: 2 }, 3), request_seed(Job { seed: 7, sample: 2 }, 3));
    }
}
