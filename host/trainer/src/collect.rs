//! Phase 1, `collect`: the step's rollouts (the actor, exploring where configured) laid
//! out as a [`StepBatch`]; and the same for SFT's (noisy) oracle episodes.

use crate::config::TrainConfig;
use crate::step_batch::{Source, StepBatch};
use crate::train::Trainer;
use anyhow::Result;
use vagen_model::SamplingFor;
use vagen_policy::ChatModel;
use vagen_rollout::{
    AnswerOrigin, ChatTokenizer, Exploring, LayoutOptions, NoisyOracle, RolloutMetrics, Trajectory, layout,
};

/// Seeds per SFT step are drawn from this many per step, below the RL seeds.
pub(crate) const SFT_SEED_STRIDE: u64 = 1024;

/// What `collect` gives the step: the batch and the rollout's own figures.
pub struct Collected {
    pub batch: StepBatch,
    /// Over every episode (every rank's), failed ones included.
    pub rollout: RolloutMetrics,
    /// Trajectories this rank laid out into its batch (failed ones counted: they number the
    /// episodes).
    pub laid_out: usize,
    /// Turns whose answer exploration replaced.
    pub explored_turns: usize,
    /// What the generation engine did (`None` for the static engine).
    pub engine: Option<vagen_model::EngineStats>,
    /// The reward functions' figures (`reward/<name>/<metric>`).
    pub reward_metrics: std::collections::BTreeMap<String, f64>,
    /// How the episodes were played.
    pub pace: Pace,
    /// The versions of the tokens sampled (every rank's).
    pub versions: TokenVersions,
    /// Batches dropped before this one for staleness.
    pub dropped: Dropped,
    /// Sampled answers (every rank's), and those that stopped at `rollout.max_new_tokens`
    /// before ending.
    pub answers: Answers,
}

/// Sampled answers and how many were cut at the token cap.
#[derive(Debug, Clone, Copy, Default)]
pub struct Answers {
    pub sampled: usize,
    pub capped: usize,
}

impl Answers {
    /// Over `trajs`' sampled turns: an answer as long as the cap whose last id ends no turn.
    pub fn of(trajs: &[Trajectory], max_new_tokens: usize, eos: &[u32]) -> Self {
        let mut a = Answers::default();
        for turn in trajs.iter().flat_map(|t| &t.turns).filter(|t| t.origin == AnswerOrigin::Model) {
            a.sampled += 1;
            let ids = turn.token_ids.as_deref().unwrap_or(&[]);
            a.capped += usize::from(ids.len() >= max_new_tokens && ids.last().is_some_and(|l| !eos.contains(l)));
        }
        a
    }

    /// The share cut at the cap (0 with no sampled answer).
    pub fn capped_share(&self) -> f64 {
        if self.sampled == 0 { 0.0 } else { self.capped as f64 / self.sampled as f64 }
    }
}

/// Batches dropped for staleness, and their sampled tokens.
#[derive(Debug, Clone, Copy, Default)]
pub struct Dropped {
    pub batches: usize,
    pub tokens: usize,
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
    pub outcome: vagen_rollout::Outcome,
    pub engine: Option<vagen_model::EngineStats>,
    pub pace: Pace,
    pub versions: TokenVersions,
}

/// The weights' versions of the tokens a model sampled in a batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TokenVersions {
    pub tokens: usize,
    /// The versions summed (their mean is `sum / tokens`).
    pub sum: f64,
    pub oldest: Option<usize>,
}

impl TokenVersions {
    /// Over the sampled tokens of `trajs`; a turn that records no versions was sampled by
    /// `version` whole.
    pub fn of(trajs: &[Trajectory], version: usize) -> Self {
        let mut v = TokenVersions::default();
        for turn in trajs.iter().flat_map(|t| &t.turns) {
            let Some(ids) = &turn.token_ids else { continue };
            let each: Vec<usize> = match &turn.versions {
                Some(vs) => vs.iter().map(|&x| x as usize).collect(),
                None => vec![version; ids.len()],
            };
            v.add(&TokenVersions {
                tokens: each.len(),
                sum: each.iter().sum::<usize>() as f64,
                oldest: each.iter().copied().min(),
            });
        }
        v
    }

    pub fn add(&mut self, o: &TokenVersions) {
        self.tokens += o.tokens;
        self.sum += o.sum;
        self.oldest = match (self.oldest, o.oldest) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// Updates between the tokens' weights and `now`'s: the mean over tokens, and the
    /// largest (0 without tokens).
    pub fn staleness(&self, now: usize) -> (f64, usize) {
        if self.tokens == 0 {
            return (0.0, 0);
        }
        (now as f64 - self.sum / self.tokens as f64, now - self.oldest.unwrap_or(now).min(now))
    }
}

/// RL step `step`'s episodes (0-based): `env.groups` seeds × `env.group_size`, drawn from
/// the step number (a resumed run makes the same rollouts), this rank's block of the groups,
/// answered by `model` (exploring where configured).
pub(crate) fn play(
    cfg: &TrainConfig,
    plugin: &dyn vagen_runtime::Plugin,
    model: std::rc::Rc<vagen_model::Model>,
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
    let options = cfg.rollout.sampling.options(SamplingFor::Training, cfg.rollout.episodes.format.stop_strings(), seed);
    let mut inner = crate::train::model_policy(cfg, model, options);
    if let Some(r) = refresh {
        inner = inner.with_refresh(r).map_err(anyhow::Error::msg)?;
    }
    let mut policy = Exploring {
        inner,
        format: cfg.rollout.episodes.format,
        rate: cfg.rollout.episodes.explore,
        at: cfg.rollout.episodes.explore_at,
    };
    let outcome = crate::train::play_groups(cfg, plugin, &seeds, cfg.env.group_size, &mut policy, (rank, world))?;
    let engine = policy.inner.engine_stats();
    let pace = Pace { play_s: started.elapsed().as_secs_f64(), ..Pace::default() };
    let versions = TokenVersions::of(&outcome.trajectories, version);
    Ok(Played { step, outcome, engine, pace, versions })
}

impl Trainer {
    /// The RL step's episodes ([`play`]ed here, or taken from the generator thread), judged
    /// by `env.max_failure_rate` before any work on them, scored by the reward functions and
    /// laid out.
    pub(crate) fn collect(&self) -> Result<Collected> {
        let cfg = &self.cfg;
        let (played, versions, dropped) = self.fresh()?;
        let n = self.state.step + 1;
        let env_config = cfg.train_env_config_json();
        self.check_failures(played.outcome.verdict, &format!("step {n}"), &format!("step{n}"), &env_config)?;
        let mut trajs = played.outcome.trajectories;
        let explored_turns = trajs.iter().flat_map(|t| &t.turns).filter(|t| t.origin == AnswerOrigin::Forced).count();
        let answers = Answers::of(&trajs, cfg.rollout.sampling.max_new_tokens, &self.actor.eos_token_ids);
        // Every rank's counts, in one collective.
        let mut sums = [explored_turns as f64, answers.sampled as f64, answers.capped as f64];
        self.ranks().sum(&mut sums)?;
        let answers = Answers { sampled: sums[1] as usize, capped: sums[2] as usize };
        let engine = crate::data_parallel::engine_stats(self.ranks(), played.engine)?;
        let scored =
            self.rewards.borrow_mut().score(&mut trajs, cfg.rollout.episodes.format, cfg.env.max_failure_rate)?;
        if self.ranks().is_main() {
            crate::report::save_rewards(&self.run_dir, n, &scored)?;
        }
        let reward_metrics = crate::data_parallel::weighted_means(self.ranks(), &scored.metrics, trajs.len() as f64)?;
        // After scoring: `train/reward` includes what the reward functions paid.
        let rollout = crate::data_parallel::rollout_metrics(self.ranks(), vagen_rollout::RolloutTotals::of(&trajs))?;
        // A trajectory with a turn no reward could score has no return to learn from.
        let kept: Vec<Trajectory> = trajs
            .into_iter()
            .enumerate()
            .filter(|(i, _)| scored.unscored.binary_search(i).is_err())
            .map(|(_, t)| t)
            .collect();
        let batch = lay_out(cfg, &ChatModel(self.actor.as_ref()), &kept)?;
        let (laid_out, explored_turns) = (kept.len(), sums[0] as usize);
        let pace = played.pace;
        Ok(Collected {
            batch,
            rollout,
            laid_out,
            explored_turns,
            engine,
            reward_metrics,
            pace,
            versions,
            dropped,
            answers,
        })
    }

    /// The next played batch whose oldest token (over every rank's) is at most
    /// `max_staleness` updates old; older ones are dropped, with every rank, and counted.
    fn fresh(&self) -> Result<(Played, TokenVersions, Dropped)> {
        let mut dropped = Dropped::default();
        if self.cfg.asynchronous.max_staleness == 0 {
            // Played now with the current weights: nothing to gather or drop.
            let played = self.played()?;
            let versions = played.versions;
            return Ok((played, versions, dropped));
        }
        loop {
            let played = self.played()?;
            let versions = crate::data_parallel::token_versions(self.ranks(), played.versions)?;
            if versions.staleness(self.state.step).1 <= self.cfg.asynchronous.max_staleness {
                return Ok((played, versions, dropped));
            }
            dropped.batches += 1;
            dropped.tokens += versions.tokens;
        }
    }

    /// SFT step `k`'s episodes (`sft.episodes_per_step` seeds, one episode each) with the
    /// oracle's answers, some swapped for random ones (`sft.action_noise`): those move the
    /// episode but are taken out of the loss.
    pub(crate) fn collect_sft(&self, k: u64) -> Result<StepBatch> {
        let cfg = &self.cfg;
        let seeds: Vec<u64> =
            (0..cfg.sft.episodes_per_step as u64).map(|i| cfg.env.train_seed_start + k * SFT_SEED_STRIDE + i).collect();
        let mut policy = NoisyOracle { format: cfg.rollout.episodes.format, noise: cfg.sft.action_noise };
        let n = self.state.sft_steps_done + 1;
        let trajs = self.episodes(&seeds, 1, &mut policy, &format!("SFT step {n}"), &format!("sft{n}"))?;
        let mut batch = lay_out(cfg, &ChatModel(self.actor.as_ref()), &trajs)?;
        batch.mask_out(AnswerOrigin::Noisy);
        Ok(batch)
    }
}

/// Training sequences, one per trajectory or one per turn (`rollout.per_turn`), in
/// trajectory order; failed and turn-less trajectories are left out.
pub fn lay_out(cfg: &TrainConfig, tok: &dyn ChatTokenizer, trajs: &[Trajectory]) -> Result<StepBatch> {
    let options = LayoutOptions {
        max_tokens: cfg.rollout.sequences.max_sequence_tokens,
        rewards: cfg.rollout.sequences.rewards,
        max_image_tokens: cfg.rollout.sequences.max_image_tokens,
    };
    let mut batch = StepBatch::new();
    for (i, t) in trajs.iter().enumerate() {
        if t.failure.is_some() || t.turns.is_empty() {
            continue;
        }
        let source = |turns| Source { episode: i, group: t.group as u64, seed: t.seed, turns };
        let turns = t.assistant_turns();
        if cfg.rollout.sequences.per_turn {
            for (k, turn) in turns.into_iter().enumerate() {
                let seq = layout(tok, &t.system, &[turn], &options)?;
                batch.push(seq, source(vec![(k, &t.turns[k])]));
            }
        } else {
            let seq = layout(tok, &t.system, &turns, &options)?;
            let kept = t.turns.iter().enumerate().take(seq.turn_ends.len()).collect();
            batch.push(seq, source(kept));
        }
    }
    Ok(batch)
}
