//! The SFT warm start's step: cross-entropy on the answer tokens of (noisy) oracle episodes
//! played through the rollout path, or of conversations from a file (`sft.data`), the mean
//! over every rank's tokens.

use crate::chat_data::ChatData;
use crate::collect::collect_sft;
use crate::config::SftSection;
use crate::metrics::StepMetrics;
use crate::micro::{Micro, logprobs_and_entropy};
use crate::optimizer::{AdamW, StepReport};
use crate::play::RunEnv;
use crate::step_batch::{StepBatch, split};
use anyhow::Result;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use tch::Kind;
use vagen_model::Model;

/// A fixed dataset's (`sft.dataset_steps`) laid-out oracle episodes, by the step of the
/// cycle that played them.
pub(crate) type Played = HashMap<u64, StepBatch>;

/// SFT step `done + 1` (`done` steps before it) on `actor`, on `chats` when the run has a
/// file of them: its mean loss, and what the optimiser step did.
pub(crate) fn step(
    run: &RunEnv,
    actor: &Model,
    opt: &mut AdamW,
    done: usize,
    chats: Option<&ChatData>,
    played: &mut Played,
) -> Result<(f64, StepReport)> {
    let cfg = run.cfg;
    // With a fixed dataset, every step replays the same episodes.
    let k = match cfg.sft.dataset_steps {
        0 => done as u64,
        n => (done % n) as u64,
    };
    // This rank's share of the step's episodes; the mean is over every rank's tokens.
    let fresh;
    let batch = match chats {
        Some(data) => {
            let n = cfg.sft.episodes_per_step;
            fresh = data.step_batch(cfg, actor, k, n, run.ranks.share(n))?;
            &fresh
        }
        None if cfg.sft.dataset_steps > 0 => {
            // Played once: a replay gives the same episodes (the seeds and the oracle's
            // noise are the step's) at the simulator's cost, which dominates a heavy env.
            match played.entry(k) {
                Entry::Occupied(e) => &*e.into_mut(),
                Entry::Vacant(e) => &*e.insert(collect_sft(run, actor, k, done + 1)?),
            }
        }
        None => {
            fresh = collect_sft(run, actor, k, done + 1)?;
            &fresh
        }
    };
    // Mean cross-entropy over the step's answer tokens, accumulated as sums.
    let mut total = 0.0;
    let mut tokens = [batch.tokens.loss_mask.iter().filter(|&&m| m).count() as f64];
    run.ranks.sum(&mut tokens)?;
    let all_tokens = (tokens[0] as usize).max(1);
    let seqs: Vec<usize> = (0..batch.len()).collect();
    for chunk in split(batch, &seqs, cfg.optim.micro_batch, cfg.optim.micro_batch_tokens) {
        let micro = Micro::new(batch, &chunk, actor.vision.as_ref(), actor.device())?;
        let (logp, _) = logprobs_and_entropy(actor, &micro, 1.0)?;
        let nll = -(logp * &micro.loss_mask).sum(Kind::Float);
        total += nll.double_value(&[]);
        (nll / all_tokens as f64).backward();
    }
    let mut sums = [total];
    run.ranks.sum(&mut sums)?;
    total = sums[0];
    let report = opt.step_across(run.ranks, cfg.sft.lr, cfg.optim.grad_clip)?;
    Ok((total / all_tokens as f64, report))
}

/// The line of `metrics.jsonl` for the SFT step that made `done` steps; with a fixed
/// dataset, whether its episodes were the ones played before (`sft/replayed`).
pub(crate) fn metrics(loss: f64, report: &StepReport, done: usize, replayed: Option<bool>) -> StepMetrics {
    let mut m = StepMetrics::new(0);
    if let Some(r) = replayed {
        m.values.insert("sft/replayed".into(), f64::from(u8::from(r)));
    }
    m.values.insert("sft/loss".into(), loss);
    m.values.insert("sft/grad_norm".into(), report.grad_norm);
    m.values.insert("sft/step".into(), done as f64);
    m
}

/// Whether a checkpoint follows the SFT step that made `done` steps: every `save_every`,
/// and the last.
pub(crate) fn save_due(sft: &SftSection, done: usize) -> bool {
    done == sft.steps || (sft.save_every > 0 && done.is_multiple_of(sft.save_every))
}
