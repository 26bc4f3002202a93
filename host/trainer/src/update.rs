//! Phase 4, `update`: PPO epochs over the kept sequences, shuffled into mini-batches (one
//! optimiser step each) and micro-batches (gradients accumulated), for the actor and, with
//! a critic, the value loss.

use crate::config::TrainConfig;
use crate::data_parallel::sum_pairs;
use crate::micro::{Micro, column, logprobs_and_entropy};
use crate::optimizer::AdamW;
use crate::policy_loss::{Behaviour, OffPolicy, PolicyLossInput, policy_loss};
use crate::score::Models;
use crate::step_batch::{StepBatch, split};
use crate::value_loss::value_loss;
use anyhow::Result;
use std::collections::BTreeMap;
use std::ops::Range;
use vagen_dist::Ranks;

/// The optimisers the update steps.
pub struct Optimizers<'a> {
    pub actor: &'a mut AdamW,
    pub critic: Option<&'a mut AdamW>,
}

/// The update's figures, averaged over the epochs.
#[derive(Debug, Default)]
pub struct Updated {
    pub metrics: BTreeMap<String, f64>,
    /// An actor step was tried (some sequence was kept).
    pub attempted: bool,
    /// An actor step was applied (a finite gradient norm).
    pub applied: bool,
    pub lr: f64,
}

/// Where the update runs: the ranks, and which of the batch's sequences are this rank's
/// (all of them in one process).
pub struct Shard<'a> {
    pub ranks: &'a Ranks,
    pub own: Range<usize>,
}

/// `step` (0-based) seeds the shuffle: the order depends only on it and `schedule.seed`, so
/// every rank walks the same mini-batches, each running its own sequences of them.
pub fn update(
    cfg: &TrainConfig,
    models: &Models,
    opt: Optimizers,
    batch: &StepBatch,
    step: u64,
    shard: &Shard,
) -> Result<Updated> {
    let credit = batch.credit()?;
    let kept: Vec<usize> = (0..batch.len()).filter(|&k| credit.keep[k]).collect();
    let o = &cfg.optim;
    let lr_scale = o.lr_scale(step as usize, cfg.schedule.steps);
    let mut out = Updated { lr: o.actor_lr * lr_scale, ..Default::default() };
    // Per micro-batch (summed over ranks at the end) and per optimiser step (the same on
    // every rank).
    let (mut acc, mut steps) = (Accumulator::default(), Accumulator::default());
    let mut order: Vec<usize> = (0..kept.len()).collect();
    let mut rng = step.wrapping_mul(6364136223846793005).wrapping_add(cfg.schedule.seed);
    let Optimizers { actor: actor_opt, critic: mut critic_opt } = opt;
    for _ in 0..o.epochs {
        shuffle(&mut order, &mut rng);
        for mini in order.chunks(o.mini_batch) {
            let seqs: Vec<usize> = mini.iter().map(|&i| kept[i]).collect();
            let mini_tokens: usize = seqs.iter().map(|&k| batch.loss_tokens(k)).sum();
            let mine: Vec<usize> = seqs.iter().copied().filter(|k| shard.own.contains(k)).collect();
            for micro_seqs in split(batch, &mine, o.micro_batch, o.micro_batch_tokens) {
                let micro = Micro::new(batch, &micro_seqs, models.actor.vision.as_ref(), models.actor.device())?;
                let weight = micro.tokens as f64 / mini_tokens.max(1) as f64;
                micro_step(cfg, models, &micro, weight, &mut acc)?;
            }
            let r = actor_opt.step_across(shard.ranks, o.actor_lr * lr_scale, o.grad_clip)?;
            (out.attempted, out.applied) = (true, out.applied | r.applied);
            steps.add("actor/grad_norm", if r.grad_norm.is_finite() { r.grad_norm } else { 0.0 }, 1.0);
            steps.count("actor/skipped_steps", !r.applied);
            if let Some(opt) = critic_opt.as_deref_mut() {
                let r = opt.step_across(shard.ranks, o.critic_lr * lr_scale, o.grad_clip)?;
                steps.add("critic/grad_norm", if r.grad_norm.is_finite() { r.grad_norm } else { 0.0 }, 1.0);
                steps.count("critic/skipped_steps", !r.applied);
            }
        }
    }
    sum_pairs(shard.ranks, &mut acc.sums)?;
    out.metrics = acc.means().chain(steps.means()).collect();
    Ok(out)
}

/// One micro-batch's losses, backpropagated with `weight` (its share of the mini-batch's
/// tokens), in the order of the paper: ratio, clipped surrogate, KL, entropy; then the
/// critic's clipped value loss.
fn micro_step(cfg: &TrainConfig, models: &Models, micro: &Micro, weight: f64, acc: &mut Accumulator) -> Result<()> {
    let temperature = cfg.rollout.sampling.temperature.max(1e-6);
    let (logp, entropy) = logprobs_and_entropy(models.actor, micro, temperature)?;
    let ref_logp = match models.reference {
        Some(_) => Some(column(&micro.ref_logprobs, "reference log-probs")?),
        None => None,
    };
    let out = policy_loss(
        &cfg.algorithm.policy_loss,
        &PolicyLossInput {
            log_probs: &logp,
            old_log_probs: column(&micro.old_logprobs, "old log-probs")?,
            advantages: column(&micro.advantages, "advantages")?,
            mask: &micro.loss_mask,
            entropy: Some(&entropy),
            ref_log_probs: ref_logp,
            behaviour: match cfg.off_policy() {
                OffPolicy::None => None,
                correction => Some(Behaviour {
                    log_probs: column(&micro.behaviour_logprobs, "behaviour log-probs")?,
                    correction,
                    cap: cfg.algorithm.off_policy_cap,
                }),
            },
        },
    );
    if ref_logp.is_some() {
        acc.add("actor/kl", out.kl, weight);
    }
    (out.loss * weight).backward();
    acc.add("actor/pg_loss", out.pg_loss, weight);
    acc.add("actor/pg_clipfrac", out.clip_frac_high + out.clip_frac_low, weight);
    acc.add("actor/ppo_kl", out.approx_kl, weight);
    acc.add("actor/entropy", out.entropy, weight);
    if cfg.off_policy() != OffPolicy::None {
        acc.add("actor/off_policy_weight", out.off_policy_weight, weight);
        acc.add("actor/off_policy_capped_frac", out.off_policy_capped, weight);
    }
    if let Some(critic) = models.critic {
        let values = critic.forward_images(&micro.ids, &micro.positions, &micro.images.iter().collect::<Vec<_>>())?;
        let n = values.size()[1];
        let v = value_loss(
            &cfg.algorithm.value_loss,
            &values.narrow(1, 0, n - 1),
            column(&micro.old_values, "old values")?,
            column(&micro.returns, "returns")?,
            column(&micro.value_mask, "value mask")?,
        );
        (v.loss * weight).backward();
        acc.add("critic/vf_loss", v.value_loss, weight);
        acc.add("critic/vf_clipfrac", v.clip_frac, weight);
    }
    Ok(())
}

/// Epoch averages: each value weighted by its micro-batch's share of its mini-batch, then
/// averaged over mini-batches (not the last mini-batch's value).
#[derive(Default)]
struct Accumulator {
    sums: BTreeMap<String, (f64, f64)>,
}

impl Accumulator {
    fn add(&mut self, key: &str, value: f64, weight: f64) {
        let e = self.sums.entry(key.to_string()).or_insert((0.0, 0.0));
        e.0 += value * weight;
        e.1 += weight;
    }
    fn count(&mut self, key: &str, hit: bool) {
        let e = self.sums.entry(key.to_string()).or_insert((0.0, 0.0));
        e.0 += hit as u8 as f64;
        e.1 = 1.0;
    }
    fn means(&self) -> impl Iterator<Item = (String, f64)> + '_ {
        self.sums.iter().map(|(k, (s, w))| (k.clone(), if *w > 0.0 { s / w } else { 0.0 }))
    }
}

/// Fisher–Yates with a 64-bit LCG: the order depends only on the step and the seed.
fn shuffle(v: &mut [usize], state: &mut u64) {
    for i in (1..v.len()).rev() {
        *state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let j = ((*state >> 33) % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credit::assign_credit;
    use crate::score::{ScoreOptions, score};
    use crate::step_batch::Source;
    use crate::step_batch::tests::{sequence, turn};
    use vagen_rollout::AnswerOrigin;

    #[test]
    fn kept_sequences_move_the_actor_and_a_batch_with_none_kept_does_not() {
        let cfg: TrainConfig = toml::from_str(
            "[env]\nplugin = \"x.wasm\"\n[rollout]\nper_turn = true\n[algorithm.advantage]\nestimator = \"grpo\"\n[schedule]\nsteps = 4\n",
        )
        .unwrap();
        let actor = vagen_model::default_model(5, Default::default()).unwrap();
        let models = Models { actor: &actor, reference: None, critic: None };
        let (win, lose) = (turn("s", 1.0, AnswerOrigin::Model), turn("s", 0.0, AnswerOrigin::Model));
        let mut batch = StepBatch::new();
        batch.push(sequence(&[&win], 3, 2), Source { episode: 0, group: 0, seed: 0, turns: vec![(0, &win)] });
        batch.push(sequence(&[&lose], 3, 2), Source { episode: 1, group: 0, seed: 0, turns: vec![(0, &lose)] });
        let o = ScoreOptions { reuse_logprobs: false, temperature: 1.0, micro_batch: 8, micro_batch_tokens: 0 };
        score(&models, &o, &mut batch).unwrap();
        assign_credit(&cfg, &mut batch).unwrap();
        // Summed in name order: the same weights always give the same figure.
        let weights = |m: &vagen_model::Model| {
            let vars: std::collections::BTreeMap<_, _> = m.vs.variables().into_iter().collect();
            vars.values().map(|t| t.abs().sum(tch::Kind::Double).double_value(&[])).sum::<f64>()
        };
        let before = weights(&actor);
        let mut opt = AdamW::new(actor.vs.variables(), 0.0);
        let ranks = Ranks::single();
        let shard = Shard { ranks: &ranks, own: 0..batch.len() };
        let out = update(&cfg, &models, Optimizers { actor: &mut opt, critic: None }, &batch, 0, &shard).unwrap();
        assert!(out.attempted && out.applied);
        assert!(weights(&actor) != before, "an applied step moves the weights");
        for key in ["actor/pg_loss", "actor/entropy", "actor/grad_norm", "actor/ppo_kl"] {
            assert!(out.metrics[key].is_finite(), "{key}: {:?}", out.metrics);
        }
        // First step, old = new: the ratio is 1, nothing is clipped.
        assert_eq!(out.metrics["actor/pg_clipfrac"], 0.0);

        batch.credit.as_mut().unwrap().keep = vec![false, false];
        let after = weights(&actor);
        let out = update(&cfg, &models, Optimizers { actor: &mut opt, critic: None }, &batch, 1, &shard).unwrap();
        assert!(!out.attempted && !out.applied && out.metrics.is_empty());
        assert_eq!(weights(&actor), after);
    }
}
