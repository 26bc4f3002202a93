//! Held-out evaluation: `env.val_episodes` seeds at the evaluation temperature, each rank
//! its block, the figures over all of them; rank 0 keeps sample transcripts and the first
//! frame.

use crate::metrics::{MetricsLog, StepMetrics};
use crate::play::{RunEnv, held_out_share};
use anyhow::Result;
use std::rc::Rc;
use vagen_model::Model;
use vagen_rollout::{RolloutMetrics, RolloutTotals};

/// The held-out episodes' figures for `model` at RL step `step`; their sample transcripts
/// go to the run folder (with `metrics`, rank 0's log). A failed episode counts as a
/// failure, and too many stop the run as in training.
pub(crate) fn evaluate(
    run: &RunEnv,
    model: Rc<Model>,
    metrics: Option<&MetricsLog>,
    step: usize,
) -> Result<RolloutMetrics> {
    let outcome = held_out_share(run.cfg, run.plugin, model, run.ranks, false)?;
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
    crate::data_parallel::rollout_metrics(run.ranks, RolloutTotals::of(&outcome.trajectories))
}

/// `val/success` and the figures that explain it, as `vagen-host eval` prints them.
pub(crate) fn insert_val(m: &mut StepMetrics, v: &RolloutMetrics) {
    m.values.insert("val/success".into(), v.success);
    m.values.insert("val/turns".into(), v.mean_turns);
    m.values.insert("val/format_correct_rate".into(), v.format_correct_rate);
}
