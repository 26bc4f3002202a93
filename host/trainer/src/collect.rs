//! Phase 1, `collect`: the step's rollouts (the actor, exploring where configured) laid
//! out as a [`StepBatch`]; and the same for SFT's (noisy) oracle episodes.

use crate::config::TrainConfig;
use crate::generator::Generator;
use crate::play::{Pace, Played, RunEnv, SFT_SEED_STRIDE, play};
use crate::rewards::Rewards;
use crate::step_batch::{Source, StepBatch};
use crate::token_versions::TokenVersions;
use anyhow::Result;
use std::rc::Rc;
use vagen_model::Model;
use vagen_policy::ChatModel;
use vagen_rollout::{
    AnswerOrigin, ChatTokenizer, LayoutOptions, NoisyOracle, Recorded, RolloutMetrics, Trajectory, TurnRecord, layout,
};

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

/// Where an RL step's episodes come from.
pub(crate) enum Rollouts<'a> {
    /// [`play`]ed now by this model (the actor, or its merged copy).
    Now(Rc<Model>),
    /// Taken from the `[async]` generator thread, played ahead.
    Ahead(&'a Generator),
}

impl Rollouts<'_> {
    /// Step `step`'s (0-based) episodes, as this rank plays them.
    fn next(&self, run: &RunEnv, step: usize) -> Result<Played> {
        match self {
            Rollouts::Ahead(g) => g.take(step),
            Rollouts::Now(model) => play(run.cfg, run.plugin, model.clone(), step, step, run.share(), None),
        }
    }
}

/// The RL step's episodes (from `rollouts`), judged by `env.max_failure_rate` before any
/// work on them, scored by the reward functions and laid out. `step` is the step's number,
/// 0-based.
pub(crate) fn collect(
    run: &RunEnv,
    actor: &Model,
    rollouts: Rollouts,
    rewards: &mut Rewards,
    step: usize,
) -> Result<Collected> {
    let cfg = run.cfg;
    let (played, versions, dropped) = fresh(run, &rollouts, step)?;
    let n = step + 1;
    let env_config = cfg.train_env_config_json();
    run.check_failures(played.outcome.verdict, &format!("step {n}"), &format!("step{n}"), &env_config)?;
    let mut trajs = played.outcome.trajectories;
    let (mut recorded, harness_metrics) = match played.harness {
        Some((r, m)) => (Some(r), m),
        None => (None, Default::default()),
    };
    let explored_turns = trajs.iter().flat_map(|t| &t.turns).filter(|t| t.origin == AnswerOrigin::Forced).count();
    let answers = Answers::of(&trajs, cfg.rollout.sampling.max_new_tokens, &actor.eos_token_ids);
    // Every rank's counts, in one collective.
    let mut sums = [explored_turns as f64, answers.sampled as f64, answers.capped as f64];
    run.ranks.sum(&mut sums)?;
    let answers = Answers { sampled: sums[1] as usize, capped: sums[2] as usize };
    let engine = crate::data_parallel::engine_stats(run.ranks, played.engine)?;
    let scored = rewards.score(&mut trajs, cfg.rollout.episodes.format, cfg.env.max_failure_rate)?;
    if run.ranks.is_main() {
        crate::report::save_rewards(run.run_dir, n, &scored)?;
    }
    let mut figures = scored.metrics.clone();
    figures.extend(harness_metrics);
    let reward_metrics = crate::data_parallel::weighted_means(run.ranks, &figures, trajs.len() as f64)?;
    // After scoring: `train/reward` includes what the reward functions paid.
    let rollout = crate::data_parallel::rollout_metrics(run.ranks, vagen_rollout::RolloutTotals::of(&trajs))?;
    // A trajectory with a turn no reward could score has no return to learn from.
    let unscored = |i: &usize| scored.unscored.binary_search(i).is_ok();
    let kept: Vec<Trajectory> = trajs.into_iter().enumerate().filter(|(i, _)| !unscored(i)).map(|(_, t)| t).collect();
    let batch = match recorded.take() {
        Some(r) => {
            let r: Vec<Recorded> = r.into_iter().enumerate().filter(|(i, _)| !unscored(i)).map(|(_, r)| r).collect();
            lay_out_recorded(&kept, r)
        }
        None => lay_out(cfg, &ChatModel(actor), &kept)?,
    };
    let (laid_out, explored_turns) = (kept.len(), sums[0] as usize);
    let pace = played.pace;
    Ok(Collected { batch, rollout, laid_out, explored_turns, engine, reward_metrics, pace, versions, dropped, answers })
}

/// The next played batch whose oldest token (over every rank's) is at most
/// `max_staleness` updates older than step `step`; older ones are dropped, with every rank,
/// and counted.
fn fresh(run: &RunEnv, rollouts: &Rollouts, step: usize) -> Result<(Played, TokenVersions, Dropped)> {
    let mut dropped = Dropped::default();
    if run.cfg.asynchronous.max_staleness == 0 {
        // Played now with the current weights: nothing to gather or drop.
        let played = rollouts.next(run, step)?;
        let versions = played.versions;
        return Ok((played, versions, dropped));
    }
    loop {
        let played = rollouts.next(run, step)?;
        let versions = crate::data_parallel::token_versions(run.ranks, played.versions)?;
        if versions.staleness(step).1 <= run.cfg.asynchronous.max_staleness {
            return Ok((played, versions, dropped));
        }
        dropped.batches += 1;
        dropped.tokens += versions.tokens;
    }
}

/// SFT step `k`'s episodes (`sft.episodes_per_step` seeds, one episode each) with the
/// oracle's answers, some swapped for random ones (`sft.action_noise`): those move the
/// episode but are taken out of the loss. `n` numbers the step (1-based) in errors.
pub(crate) fn collect_sft(run: &RunEnv, actor: &Model, k: u64, n: usize) -> Result<StepBatch> {
    let cfg = run.cfg;
    let seeds: Vec<u64> =
        (0..cfg.sft.episodes_per_step as u64).map(|i| cfg.env.train_seed_start + k * SFT_SEED_STRIDE + i).collect();
    let mut policy = NoisyOracle { format: cfg.rollout.episodes.format, noise: cfg.sft.action_noise };
    let trajs = run.episodes(&seeds, 1, &mut policy, &format!("SFT step {n}"), &format!("sft{n}"))?;
    let mut batch = lay_out(cfg, &ChatModel(actor), &trajs)?;
    batch.mask_out(AnswerOrigin::Noisy);
    Ok(batch)
}

/// A harness run's training sequences: each trajectory's recorded ones, a turn per call,
/// each turn's reward on its last token.
pub(crate) fn lay_out_recorded(trajs: &[Trajectory], recorded: Vec<Recorded>) -> StepBatch {
    let mut batch = StepBatch::new();
    for (i, (t, r)) in trajs.iter().zip(recorded).enumerate() {
        if t.failure.is_some() || t.turns.is_empty() {
            continue;
        }
        let mut turns = t.turns.iter().enumerate();
        for mut seq in r.sequences {
            let kept: Vec<(usize, &TurnRecord)> = turns.by_ref().take(seq.turn_ends.len()).collect();
            for (&end, (_, turn)) in seq.turn_ends.iter().zip(&kept) {
                seq.rewards[end] = turn.reward as f32;
            }
            batch.push(seq, Source { episode: i, group: t.group as u64, seed: t.seed, turns: kept });
        }
    }
    batch
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
