//! Episodes played the way a run plays them: an RL step's (seeds from the step number, the
//! actor exploring where configured), the model answering within the run's budgets, a
//! step's groups shared out among the ranks and numbered as one process numbers them, the
//! held-out evaluation's episodes, and the failure policy that stops a run (with a
//! reproducer). Collect, SFT, evaluation, the embedded model's vocabulary and the generator
//! thread all play through here.

use crate::config::TrainConfig;
use crate::token_versions::TokenVersions;
use anyhow::{Result, bail};
use std::path::Path;
use std::rc::Rc;
use vagen_dist::Ranks;
use vagen_model::{GenerateOptions, Model, SamplingFor};
use vagen_policy::ModelPolicy;
use vagen_rollout::{
    EpisodeShape, Episodes, Exploring, FailurePolicy, Outcome, Policy, RolloutConfig, TooManyFailures, Trajectory,
};
use vagen_runtime::Plugin;

/// Seeds per SFT step are drawn from this many per step, below the RL seeds.
pub(crate) const SFT_SEED_STRIDE: u64 = 1024;

/// What the phases read of the run: its config, env plugin, ranks and folder.
#[derive(Clone, Copy)]
pub(crate) struct RunEnv<'a> {
    pub cfg: &'a TrainConfig,
    /// `None` for a harness run (`env.harness`).
    pub plugin: Option<&'a dyn Plugin>,
    pub ranks: &'a Ranks,
    pub run_dir: &'a Path,
}

impl<'a> RunEnv<'a> {
    /// The env plugin; a harness run has none (its episodes are played by `harness.rs`).
    pub fn plugin(&self) -> Result<&'a dyn Plugin> {
        self.plugin.ok_or_else(|| anyhow::anyhow!("this run plays a harness (env.harness), not a plugin"))
    }

    /// This process among the ranks, as `(rank, world)`.
    pub fn share(&self) -> (usize, usize) {
        (self.ranks.rank(), self.ranks.world())
    }

    /// Groups of `group_size` episodes from `seeds` on the training env config, answered
    /// by `policy`; more failures than `env.max_failure_rate` stop the run (`what` and
    /// `file` name the step in the error and the reproducer).
    pub fn episodes(
        &self,
        seeds: &[u64],
        group_size: usize,
        policy: &mut dyn Policy,
        what: &str,
        file: &str,
    ) -> Result<Vec<Trajectory>> {
        let outcome = play_groups(self.cfg, self.plugin()?, seeds, group_size, policy, self.share())?;
        self.check_failures(outcome.verdict, what, file, &self.cfg.train_env_config_json())?;
        Ok(outcome.trajectories)
    }

    /// Stops the run when more than `env.max_failure_rate` of `trajs` failed (the
    /// failure policy `vagen-host run` applies too), naming the plugin and the first error,
    /// with a reproducer of it in the run folder (`failure-{file}-seed{seed}.json`).
    pub fn check_failures(
        &self,
        verdict: Result<(), TooManyFailures>,
        what: &str,
        file: &str,
        env_config: &str,
    ) -> Result<()> {
        let Err(e) = verdict else {
            return Ok(());
        };
        let Some(plugin) = self.plugin else {
            let harness = self.cfg.env.harness.as_ref().expect("a run without a plugin has a harness");
            bail!(
                "{} of {} episodes failed in {what} (more than env.max_failure_rate {}: {}); {} failed: {}",
                e.failed,
                e.total,
                e.max_rate,
                vagen_rollout::counts_text(&e.counts),
                crate::harness::describe(harness),
                e.failure
            );
        };
        let path = self.run_dir.join(format!("failure-{file}-seed{}.json", e.seed));
        let reproducer = e.reproducer(plugin, env_config);
        std::fs::write(&path, serde_json::to_string_pretty(&reproducer)?)?;
        bail!(
            "{} of {} trajectories failed in {what} (more than env.max_failure_rate {}: {}); the env plugin {} faulted: {}; reproducer: {} (replay with `vagen-host run --replay {}`)",
            e.failed,
            e.total,
            e.max_rate,
            vagen_rollout::counts_text(&e.counts),
            self.cfg.env.plugin.display(),
            e.failure,
            path.display(),
            path.display()
        )
    }
}

/// The model answering held-out episodes as the run's own evaluations do (its evaluation
/// temperature, sequence and image budgets, engine): what `vagen-host eval --config` plays.
pub fn held_out_policy(cfg: &TrainConfig, model: Rc<Model>) -> ModelPolicy {
    let stop = cfg.rollout.episodes.format.stop_strings();
    let options = cfg.rollout.sampling.options(SamplingFor::HeldOut, stop, cfg.schedule.seed);
    model_policy(cfg, model, options)
}

/// `[env]`'s episode shape (one episode a seed): what `vagen-host eval --config` plays.
pub fn held_out_shape(cfg: &TrainConfig) -> EpisodeShape {
    shape(cfg, 1)
}

/// Groups of `group_size` episodes from rank `rank` of `world`'s block of `seeds`, on the
/// training env config, numbered as one process numbers them.
pub(crate) fn play_groups(
    cfg: &TrainConfig,
    plugin: &dyn Plugin,
    seeds: &[u64],
    group_size: usize,
    policy: &mut dyn Policy,
    (rank, world): (usize, usize),
) -> Result<Outcome> {
    let env_config = cfg.train_env_config_json();
    let config = cfg.rollout.rollout_config();
    run_share(episodes(cfg, plugin, &env_config, &config, group_size), seeds, policy, (rank, world))
}

/// `episodes` over rank `rank` of `world`'s block of `seeds`, its groups numbered as one
/// process numbers them.
fn run_share(
    episodes: Episodes,
    seeds: &[u64],
    policy: &mut dyn Policy,
    (rank, world): (usize, usize),
) -> Result<Outcome> {
    let mine = vagen_dist::share(seeds.len(), rank, world);
    let mut outcome = episodes.run(&seeds[mine.clone()], policy, &mut |_| Ok(()))?;
    outcome.trajectories.iter_mut().for_each(|t| t.group += mine.start);
    Ok(outcome)
}

/// The held-out episodes (`env.val_episodes` seeds from `env.val_seed_start`, each
/// `env.val_samples` times) over this rank's block. No progress of its own: a training
/// run's bar covers its evaluations.
pub(crate) fn held_out_share(
    cfg: &TrainConfig,
    plugin: Option<&dyn Plugin>,
    model: Rc<Model>,
    ranks: &Ranks,
) -> Result<Outcome> {
    let seeds: Vec<u64> = (0..cfg.env.val_episodes as u64).map(|i| cfg.env.val_seed_start + i).collect();
    let Some(plugin) = plugin else {
        let mine = vagen_dist::share(seeds.len(), ranks.rank(), ranks.world());
        let (samples, purpose) = (cfg.env.val_samples, SamplingFor::HeldOut);
        let seed = cfg.schedule.seed;
        let played =
            crate::harness::play_harness(cfg, &model, &seeds[mine.clone()], samples, mine.start, purpose, 0, seed)?;
        return Ok(played.outcome);
    };
    let mut policy = held_out_policy(cfg, model);
    let (env_config, config) = (cfg.env_config_json(), cfg.rollout.rollout_config());
    let episodes = episodes(cfg, plugin, &env_config, &config, cfg.env.val_samples);
    run_share(episodes, &seeds, &mut policy, (ranks.rank(), ranks.world()))
}

/// The model answering rollouts within the run's sequence and image budgets.
pub(crate) fn model_policy(cfg: &TrainConfig, model: Rc<Model>, options: GenerateOptions) -> ModelPolicy {
    ModelPolicy::new(model, options)
        .with_context_window(cfg.rollout.sequences.max_sequence_tokens)
        .with_overflow(cfg.rollout.sequences.context_overflow)
        .with_max_image_tokens(cfg.rollout.sequences.max_image_tokens)
        .with_engine(&cfg.engine)
}

/// The episode loop over groups of `group_size` in `[env]`'s shape, with the run's
/// failure policy (`env.max_failure_rate`), all groups at once.
pub(crate) fn episodes<'a>(
    cfg: &TrainConfig,
    plugin: &'a dyn Plugin,
    env_config: &'a str,
    config: &'a RolloutConfig,
    group_size: usize,
) -> Episodes<'a> {
    let failures = FailurePolicy::new(cfg.env.max_failure_rate);
    let shape = shape(cfg, group_size);
    Episodes { plugin, env_config, config, shape, failures, chunk_groups: 0 }
}

/// `[env]`'s batch shape for a rollout of `group_size` episodes a seed.
fn shape(cfg: &TrainConfig, group_size: usize) -> EpisodeShape {
    EpisodeShape {
        max_actions_per_turn: std::num::NonZeroUsize::new(cfg.env.max_actions_per_turn),
        record_states: !cfg.rewards.is_empty(),
        ..EpisodeShape::groups_of(group_size).with_max_turns(cfg.env.max_turns)
    }
}

/// Which weights played a step's episodes, and where the time went.
#[derive(Debug, Clone, Copy, Default)]
pub struct Pace {
    /// Seconds playing them took (on the generator's thread with `[async]`).
    pub play_s: f64,
    /// Seconds the generator waited for their weights before playing them.
    pub generator_wait_s: f64,
    /// Seconds the trainer waited for them (0 when it played them itself).
    pub trainer_wait_s: f64,
}

/// One RL step's episodes as played, before any scoring: on the trainer's thread, or ahead
/// of it on the generator's (`[async]`).
pub(crate) struct Played {
    /// The step (0-based) whose seeds they played.
    pub step: usize,
    pub outcome: Outcome,
    pub engine: Option<vagen_model::EngineStats>,
    pub pace: Pace,
    pub versions: TokenVersions,
    /// A harness run's recorded sequences (by trajectory) and `harness/…` figures.
    pub harness: Option<(Vec<vagen_rollout::Recorded>, std::collections::BTreeMap<String, f64>)>,
}

/// RL step `step`'s episodes (0-based): `env.groups` seeds × `env.group_size`, drawn from
/// the step number (a resumed run makes the same rollouts), this rank's block of the groups,
/// answered by `model` (exploring where configured).
pub(crate) fn play(
    cfg: &TrainConfig,
    plugin: Option<&dyn Plugin>,
    model: Rc<Model>,
    step: usize,
    version: usize,
    (rank, world): (usize, usize),
    refresh: Option<vagen_model::Refresh>,
) -> Result<Played> {
    let started = std::time::Instant::now();
    let s = step as u64;
    let base = cfg.env.train_seed_start + cfg.sft.steps as u64 * SFT_SEED_STRIDE;
    let seeds: Vec<u64> = (0..cfg.env.groups as u64).map(|g| base + s * cfg.env.groups as u64 + g).collect();
    let seed = cfg.schedule.seed ^ s.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let Some(plugin) = plugin else {
        let mine = vagen_dist::share(seeds.len(), rank, world);
        let (size, purpose, v) = (cfg.env.group_size, SamplingFor::Training, version as u64);
        let h = crate::harness::play_harness(cfg, &model, &seeds[mine.clone()], size, mine.start, purpose, v, seed)?;
        let pace = Pace { play_s: started.elapsed().as_secs_f64(), ..Pace::default() };
        let versions = TokenVersions::of(&h.outcome.trajectories, version);
        let harness = Some((h.recorded, h.metrics));
        return Ok(Played { step, outcome: h.outcome, engine: None, pace, versions, harness });
    };
    let options = cfg.rollout.sampling.options(SamplingFor::Training, cfg.rollout.episodes.format.stop_strings(), seed);
    let mut inner = model_policy(cfg, model, options);
    if let Some(r) = refresh {
        inner = inner.with_refresh(r).map_err(anyhow::Error::msg)?;
    }
    let mut policy = Exploring {
        inner,
        format: cfg.rollout.episodes.format,
        rate: cfg.rollout.episodes.explore,
        at: cfg.rollout.episodes.explore_at,
    };
    let outcome = play_groups(cfg, plugin, &seeds, cfg.env.group_size, &mut policy, (rank, world))?;
    let engine = policy.inner.engine_stats();
    let pace = Pace { play_s: started.elapsed().as_secs_f64(), ..Pace::default() };
    let versions = TokenVersions::of(&outcome.trajectories, version);
    Ok(Played { step, outcome, engine, pace, versions, harness: None })
}
