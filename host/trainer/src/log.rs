//! Phase 5, `log`: the step's metrics (verl / RAGEN names) from the batch's columns, the
//! rollout's figures, the update's averages and the phase timings.

use crate::collect::Collected;
use crate::metrics::StepMetrics;
use crate::step_batch::StepBatch;
use crate::update::Updated;
use crate::value_loss::explained_variance;

/// The share of the advantage-masked tokens whose advantage is zero (1 when every group's
/// episodes scored alike; 0 before credit is assigned or with no such token).
fn zero_advantage_share(batch: &StepBatch) -> f64 {
    let Some(credit) = &batch.credit else { return 0.0 };
    let (mut zero, mut all) = (0usize, 0usize);
    for (a, &m) in credit.advantages.iter().zip(&batch.tokens.adv_mask) {
        if m {
            all += 1;
            zero += usize::from(*a == 0.0);
        }
    }
    if all == 0 { 0.0 } else { zero as f64 / all as f64 }
}

/// Seconds per phase.
#[derive(Debug, Default, Clone, Copy)]
pub struct Timings {
    pub rollout: f64,
    pub score: f64,
    pub update: f64,
    pub step: f64,
    /// Of the step, in the vision tower's forward passes (rollout, score and update).
    pub vision: f64,
}

/// `step` is the step just done (1-based). `compared` says whether `score` ran its own
/// forward for the old log-probs, so that generation's can be compared with it.
pub fn log(step: usize, collected: &Collected, updated: &Updated, t: Timings, compared: bool) -> StepMetrics {
    let (batch, rm) = (&collected.batch, &collected.rollout);
    let mut m = StepMetrics::new(step);
    m.values.extend(updated.metrics.iter().map(|(k, v)| (k.clone(), *v)));
    if compared && let Some((mean, max)) = logprob_diff(batch) {
        m.values.insert("rollout/logprob_diff_mean".into(), mean);
        m.values.insert("rollout/logprob_diff_max".into(), max);
    }
    if let Some(ev) = critic_explained_variance(batch) {
        m.values.insert("critic/explained_variance".into(), ev);
    }
    let credit = batch.credit.as_ref();
    let (before, after) = credit.map(|c| (c.before, c.after)).unwrap_or_default();
    let response_tokens = batch.tokens.loss_mask.iter().filter(|&&x| x).count();
    for (k, v) in [
        ("train/success", rm.success),
        ("train/pass_at_group", rm.pass_at_group),
        ("train/reward", rm.mean_reward),
        ("train/turns", rm.mean_turns),
        ("train/valid_action_rate", rm.valid_action_rate),
        ("train/format_correct_rate", rm.format_correct_rate),
        ("train/failed_trajectories", rm.failed as f64),
        ("train/out_of_context_trajectories", rm.truncated_context as f64),
        ("train/truncated_sequences", batch.seqs.truncated.iter().filter(|&&x| x).count() as f64),
        ("rollout/response_length", rm.mean_response_tokens.unwrap_or(0.0)),
        ("rollout/in_group_std", before.mean_in_group_std),
        ("rollout/in_group_mean", before.mean_in_group_mean),
        ("rollout/in_group_std_kept", after.mean_in_group_std),
        ("rollout/kept_trajectories", credit.map_or(0, |c| c.keep.iter().filter(|&&k| k).count()) as f64),
        ("rollout/zero_advantage_dropped", credit.map_or(0, |c| c.zero_dropped) as f64),
        ("rollout/explored_turns", collected.explored_turns as f64),
        ("rollout/capped_responses", collected.answers.capped_share()),
        ("rollout/zero_advantage_share", zero_advantage_share(batch)),
        ("actor/lr", updated.lr),
        ("timing_s/rollout", t.rollout),
        ("timing_s/old_log_prob", t.score),
        ("timing_s/update", t.update),
        ("timing_s/step", t.step),
        ("timing_s/vision_forward", t.vision),
        ("rollout/image_tokens", batch.seqs.image_tokens.iter().sum::<usize>() as f64 / batch.len().max(1) as f64),
        ("throughput/tokens_per_s", batch.tokens.ids.len() as f64 / t.step),
        ("throughput/response_tokens", response_tokens as f64),
    ] {
        m.values.insert(k.into(), v);
    }
    m.values.extend(collected.reward_metrics.iter().map(|(k, v)| (k.clone(), *v)));
    if let Some(e) = &collected.engine {
        for (k, v) in [
            ("rollout/prefill_tokens", e.prefilled_tokens as f64),
            ("rollout/prefill_tokens_saved", e.saved_tokens() as f64),
            ("rollout/kv_fallbacks", e.fallbacks as f64),
            ("rollout/kv_evictions", e.evictions as f64),
            ("rollout/kv_peak_mib", e.peak_kv_bytes as f64 / (1 << 20) as f64),
            ("rollout/rows_freed_early", e.rows_freed_early as f64),
        ] {
            m.values.insert(k.into(), v);
        }
        // Only where the decode ran on CUDA graphs (the capture's time is in the rollout's).
        if e.graph_replays > 0 {
            m.values.insert("rollout/graph_captures".into(), e.graph_captures as f64);
            m.values.insert("timing_s/graph_capture".into(), e.graph_capture_seconds);
            m.values.insert("rollout/flash_steps".into(), e.flash_steps as f64);
            m.values.insert("rollout/steps_ahead".into(), e.steps_ahead as f64);
            m.values.insert("rollout/discarded_tokens".into(), e.discarded_tokens as f64);
        }
    }
    m
}

/// With `[async]`: the tokens' staleness at step `step` (0-based), the batches dropped
/// for it, and where the generator's and the trainer's time went. The episodes' own time is
/// the generator's (`timing_s/rollout` holds the trainer's wait for them and their scoring
/// and layout); `t.step` is the step's, `publish_s` the weights' hand-over's.
pub fn log_async(
    m: &mut StepMetrics,
    collected: &Collected,
    max_staleness: usize,
    step: usize,
    t: Timings,
    publish_s: f64,
) {
    let (pace, dropped) = (collected.pace, collected.dropped);
    let (mean, max) = collected.versions.staleness(step);
    let busy = pace.play_s + pace.generator_wait_s;
    for (name, value) in [
        ("async/max_staleness", max_staleness as f64),
        ("async/staleness", mean),
        ("async/staleness_max", max as f64),
        ("async/dropped_batches", dropped.batches as f64),
        ("async/dropped_tokens", dropped.tokens as f64),
        ("async/generator_idle", if busy > 0.0 { pace.generator_wait_s / busy } else { 0.0 }),
        ("async/trainer_idle", pace.trainer_wait_s / t.step.max(1e-9)),
        ("timing_s/generate", pace.play_s),
        ("timing_s/generator_wait", pace.generator_wait_s),
        ("timing_s/wait_batch", pace.trainer_wait_s),
        ("timing_s/weight_sync", publish_s),
    ] {
        m.values.insert(name.into(), value);
    }
}

/// How far the training forward's old log-probs are from generation's, over the answer
/// tokens the model sampled: a prompt that differs from the one the policy saw, or
/// numerics, show up here (verl logs the same). `None` without such tokens.
fn logprob_diff(batch: &StepBatch) -> Option<(f64, f64)> {
    let scores = batch.scores.as_ref()?;
    let diffs: Vec<f64> = (0..batch.len())
        .filter(|&k| !batch.has_origin(k, vagen_rollout::AnswerOrigin::Forced))
        .flat_map(|k| batch.tokens_of(k))
        .filter(|&i| batch.tokens.loss_mask[i])
        .map(|i| (scores.old_logprobs[i] - batch.tokens.sampled_logprobs[i]).abs() as f64)
        .collect();
    (!diffs.is_empty())
        .then(|| (diffs.iter().sum::<f64>() / diffs.len() as f64, diffs.iter().copied().fold(0.0, f64::max)))
}

/// 1 − Var(R − v) / Var(R) of the critic's values before the update against the returns,
/// over the value mask of the kept sequences (verl's `critic/vf_explained_var`); `None`
/// without a critic or when the returns do not vary.
fn critic_explained_variance(batch: &StepBatch) -> Option<f64> {
    let values = batch.scores.as_ref()?.values.as_ref()?;
    let credit = batch.credit.as_ref()?;
    let at: Vec<usize> = (0..batch.len())
        .filter(|&k| credit.keep[k])
        .flat_map(|k| batch.tokens_of(k))
        .filter(|&i| credit.value_mask[i])
        .collect();
    let v: Vec<f64> = at.iter().map(|&i| values[i]).collect();
    let r: Vec<f64> = at.iter().map(|&i| credit.returns[i] as f64).collect();
    let ev = explained_variance(&v, &r);
    ev.is_finite().then_some(ev)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step_batch::tests::{sequence, turn};
    use crate::step_batch::{CreditColumns, ScoreColumns, Source};
    use vagen_rollout::AnswerOrigin;

    #[test]
    fn metrics_come_from_the_columns() {
        let (a, f) = (turn("a", 1.0, AnswerOrigin::Model), turn("b", 0.0, AnswerOrigin::Forced));
        let mut batch = StepBatch::new();
        batch.push(sequence(&[&a], 2, 2), Source { episode: 0, group: 0, seed: 0, turns: vec![(0, &a)] });
        batch.push(sequence(&[&f], 2, 2), Source { episode: 1, group: 0, seed: 0, turns: vec![(0, &f)] });
        // Generation said -0.5 on every answer token; the forward says -0.25 on the model's
        // and -3 on the forced one's (which generation never scored, so it is not compared).
        let old = vec![0.0, 0.0, -0.25, -0.25, 0.0, 0.0, -3.0, -3.0];
        let values = vec![0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0];
        batch.scores = Some(ScoreColumns { old_logprobs: old, ref_logprobs: None, values: Some(values) });
        let returns = vec![0.0, 0.0, 1.0, 2.0, 0.0, 0.0, 0.0, 1.0];
        let value_mask = vec![false, false, true, true, false, false, true, true];
        batch.credit = Some(CreditColumns {
            returns,
            value_mask,
            keep: vec![true, true],
            advantages: vec![0.0, 0.0, 0.5, -0.5, 0.0, 0.0, 0.0, 0.0],
            ..Default::default()
        });
        let engine = vagen_model::EngineStats {
            prefilled_tokens: 30,
            reused_tokens: 50,
            shared_tokens: 20,
            ..Default::default()
        };
        let reward_metrics = [("reward/state-match/grounding".to_string(), 0.5)].into();
        let collected = Collected {
            batch,
            rollout: Default::default(),
            laid_out: 2,
            pace: Default::default(),
            versions: Default::default(),
            dropped: Default::default(),
            explored_turns: 1,
            engine: Some(engine),
            reward_metrics,
            answers: crate::collect::Answers { sampled: 4, capped: 1 },
        };
        let t = Timings { rollout: 1.0, score: 0.5, update: 2.0, step: 4.0, vision: 0.0 };
        let m = log(7, &collected, &Updated::default(), t, true).values;
        assert_eq!(m["rollout/logprob_diff_mean"], 0.25);
        assert_eq!(m["rollout/logprob_diff_max"], 0.25);
        // R = [1, 2, 0, 1], v = [1, 1, 0, 0]: R − v = [0, 1, 0, 1], Var 0.25 over Var(R) 0.5.
        assert!((m["critic/explained_variance"] - 0.5).abs() < 1e-12, "{m:?}");
        assert_eq!(m["throughput/tokens_per_s"], 2.0);
        assert_eq!(m["throughput/response_tokens"], 4.0);
        assert_eq!(m["rollout/kept_trajectories"], 2.0);
        assert_eq!(m["rollout/explored_turns"], 1.0);
        assert_eq!(m["rollout/capped_responses"], 0.25);
        // The answer tokens (the advantage mask): the model's two have an advantage, the
        // forced one's two none.
        assert_eq!(m["rollout/zero_advantage_share"], 0.5);
        assert_eq!(m["rollout/prefill_tokens"], 30.0);
        assert_eq!(m["rollout/prefill_tokens_saved"], 70.0);
        assert_eq!(m["reward/state-match/grounding"], 0.5);
        let m = log(7, &collected, &Updated::default(), t, false).values;
        assert!(!m.contains_key("rollout/logprob_diff_mean"), "generation's own log-probs are not compared");
    }
}
