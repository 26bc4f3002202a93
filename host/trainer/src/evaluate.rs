//! Held-out evaluation: `env.val_episodes` seeds at the evaluation temperature, each rank
//! its block, the figures over all of them; rank 0 keeps sample transcripts and the first
//! frame.

use crate::metrics::{MetricsLog, StepMetrics};
use crate::play::{RunEnv, held_out_share};
use anyhow::Result;
use std::collections::BTreeMap;
use std::rc::Rc;
use vagen_model::Model;
use vagen_rollout::{RolloutMetrics, RolloutTotals, Trajectory};

/// An evaluation's figures: the rollout's, and pass@k with `env.val_samples` above 1.
pub(crate) struct Evaluated {
    pub rollout: RolloutMetrics,
    /// `val/pass@k` → its mean over all ranks' seeds.
    pub pass_at_k: BTreeMap<String, f64>,
}

/// The held-out episodes' figures for `model` at RL step `step`; their sample transcripts
/// go to the run folder (with `metrics`, rank 0's log). A failed episode counts as a
/// failure, and too many stop the run as in training.
pub(crate) fn evaluate(run: &RunEnv, model: Rc<Model>, metrics: Option<&MetricsLog>, step: usize) -> Result<Evaluated> {
    let outcome = held_out_share(run.cfg, run.plugin, model, run.ranks)?;
    if let Some(metrics) = metrics {
        crate::report::save_samples(run.run_dir, step, &outcome.trajectories)?;
        // The first held-out episode's opening picture, when the env shows one.
        let first = outcome.trajectories.first().and_then(|t| t.turns.first());
        if let Some(image) = first.and_then(|t| t.images.first()) {
            metrics.frame(step, "eval/first-frame", image)?;
        }
    }
    let (what, file) = (format!("the evaluation at step {step}"), format!("eval{step}"));
    run.check_failures(outcome.verdict, &what, &file, &run.cfg.env_config_json())?;
    let mut pass_at_k = pass_at_k_sums(&outcome.trajectories, run.cfg.env.val_samples)?;
    crate::data_parallel::sum_pairs(run.ranks, &mut pass_at_k)?;
    Ok(Evaluated {
        rollout: crate::data_parallel::rollout_metrics(run.ranks, RolloutTotals::of(&outcome.trajectories))?,
        pass_at_k: pass_at_k.into_iter().map(|(k, (sum, seeds))| (k, sum / seeds.max(1.0))).collect(),
    })
}

/// Per k: pass@k summed over this rank's seeds (groups of `samples`, a failed episode no
/// success), and the seeds counted; none for one sample a seed.
fn pass_at_k_sums(trajs: &[Trajectory], samples: usize) -> Result<BTreeMap<String, (f64, f64)>> {
    let mut sums = BTreeMap::new();
    if samples < 2 {
        return Ok(sums);
    }
    let mut groups: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
    for t in trajs {
        let g = groups.entry(t.group).or_default();
        (g.0, g.1) = (g.0 + 1, g.1 + usize::from(t.success && t.failure.is_none()));
    }
    let problems: Vec<(usize, usize)> = groups.into_values().collect();
    let seeds = problems.len() as f64;
    for k in vagen_algo::reported_ks(samples) {
        // A rank with no seeds of its own adds nothing to the sums over ranks.
        let sum = if problems.is_empty() { 0.0 } else { vagen_algo::mean_pass_at_k(&problems, k)? * seeds };
        sums.insert(format!("val/pass@{k}"), (sum, seeds));
    }
    Ok(sums)
}

/// `val/success` and the figures that explain it, as `vagen-host eval` prints them.
pub(crate) fn insert_val(m: &mut StepMetrics, e: &Evaluated) {
    m.values.extend(e.pass_at_k.iter().map(|(k, v)| (k.clone(), *v)));
    let v = &e.rollout;
    m.values.insert("val/success".into(), v.success);
    m.values.insert("val/turns".into(), v.mean_turns);
    m.values.insert("val/format_correct_rate".into(), v.format_correct_rate);
    m.values.insert("val/valid_action_rate".into(), v.valid_action_rate);
}
