//! Phase 2, `score`: per token, the log-probs the update's ratio starts from (generation's
//! with `rollout.reuse_logprobs`, else a no-grad forward with the training code path), the
//! KL reference's, and the critic's values. Adds the batch's [`ScoreColumns`].

use crate::config::TrainConfig;
use crate::micro::{Micro, logprobs_and_entropy};
use crate::step_batch::{ScoreColumns, StepBatch, split};
use anyhow::Result;
use tch::{Kind, Tensor};
use vagen_model::{Model, ValueModel};
use vagen_rollout::AnswerOrigin;

/// The networks a step reads: the actor, and the KL reference and critic when configured.
pub struct Models<'a> {
    pub actor: &'a Model,
    pub reference: Option<&'a Model>,
    pub critic: Option<&'a ValueModel>,
}

/// How `score` runs.
pub struct ScoreOptions {
    /// Keep generation's log-probs where the model sampled the answer.
    pub reuse_logprobs: bool,
    pub temperature: f64,
    /// Sequences per forward, and padded tokens (0: no limit), as the update's.
    pub micro_batch: usize,
    pub micro_batch_tokens: usize,
}

impl ScoreOptions {
    /// As the run's config says: the update's temperature and micro-batches.
    pub fn of(cfg: &TrainConfig) -> Self {
        ScoreOptions {
            reuse_logprobs: cfg.reuses_logprobs(),
            temperature: cfg.rollout.sampling.temperature.max(1e-6),
            micro_batch: cfg.optim.micro_batch,
            micro_batch_tokens: cfg.optim.micro_batch_tokens,
        }
    }
}

pub fn score(models: &Models, o: &ScoreOptions, batch: &mut StepBatch) -> Result<()> {
    let n = batch.tokens.ids.len();
    let mut scores = ScoreColumns {
        old_logprobs: if o.reuse_logprobs { batch.tokens.sampled_logprobs.clone() } else { vec![0.0; n] },
        ref_logprobs: models.reference.map(|_| vec![0.0; n]),
        values: models.critic.map(|_| vec![0.0; n]),
    };
    // A sequence holding an answer the model did not sample (exploration) has no
    // generation log-probs to reuse. The forward covers every sequence when it computes the
    // old log-probs, a reference or values; with reused log-probs, only those.
    let forced: Vec<bool> = (0..batch.len()).map(|k| batch.has_origin(k, AnswerOrigin::Forced)).collect();
    let all = !o.reuse_logprobs || models.reference.is_some() || models.critic.is_some();
    let need: Vec<usize> = (0..batch.len()).filter(|&k| all || forced[k]).collect();
    let _g = tch::no_grad_guard();
    for chunk in split(batch, &need, o.micro_batch, o.micro_batch_tokens) {
        let micro = Micro::new(batch, &chunk, models.actor.vision.as_ref(), models.actor.device())?;
        let policy = match !o.reuse_logprobs || chunk.iter().any(|&k| forced[k]) {
            true => Some(logprobs_and_entropy(models.actor, &micro, o.temperature)?.0),
            false => None,
        };
        // The reference's log-probs once per step here, not once per epoch in the update.
        let reference = match models.reference {
            Some(r) => Some(logprobs_and_entropy(r, &micro, o.temperature)?.0),
            None => None,
        };
        let values = match models.critic {
            Some(c) => {
                Some(c.forward_images(&micro.ids, &micro.positions, &micro.images.iter().collect::<Vec<_>>())?)
            }
            None => None,
        };
        for (r, &k) in chunk.iter().enumerate() {
            let span = batch.tokens_of(k);
            if let Some(lp) = &policy
                && (!o.reuse_logprobs || forced[k])
            {
                scores.old_logprobs[span.clone()].copy_from_slice(&per_token(lp, r, span.len())?);
            }
            if let (Some(lp), Some(col)) = (&reference, &mut scores.ref_logprobs) {
                col[span.clone()].copy_from_slice(&per_token(lp, r, span.len())?);
            }
            if let (Some(v), Some(col)) = (&values, &mut scores.values) {
                let v = per_token(v, r, span.len())?;
                col[span].iter_mut().zip(v).for_each(|(c, x)| *c = x as f64);
            }
        }
    }
    batch.scores = Some(scores);
    Ok(())
}

/// Row `r`'s first `n` tokens: column j - 1 holds token j's log-prob, and the value of
/// acting at token j (read at the position before it); 0 for the first token.
fn per_token(t: &Tensor, r: usize, n: usize) -> Result<Vec<f32>> {
    let col = Vec::<f32>::try_from(t.get(r as i64).narrow(0, 0, n as i64 - 1).to_kind(Kind::Float))?;
    Ok(std::iter::once(0.0).chain(col).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step_batch::Source;
    use crate::step_batch::tests::{sequence, turn};

    /// Two sequences whose "generation" log-probs are -0.5 on every answer token; the
    /// second holds a forced answer.
    fn batch() -> StepBatch {
        let (m, f) = (turn("a", 1.0, AnswerOrigin::Model), turn("b", 0.0, AnswerOrigin::Forced));
        let mut b = StepBatch::new();
        b.push(sequence(&[&m], 3, 2), Source { episode: 0, group: 0, seed: 0, turns: vec![(0, &m)] });
        b.push(sequence(&[&f], 2, 3), Source { episode: 1, group: 0, seed: 0, turns: vec![(0, &f)] });
        b
    }

    #[test]
    fn reused_log_probs_are_kept_and_only_forced_answers_get_a_forward() {
        let actor = vagen_model::default_model(3, Default::default()).unwrap();
        let models = Models { actor: &actor, reference: None, critic: None };
        let score_with = |reuse| {
            let mut b = batch();
            let o = ScoreOptions { reuse_logprobs: reuse, temperature: 1.0, micro_batch: 8, micro_batch_tokens: 0 };
            score(&models, &o, &mut b).unwrap();
            b
        };
        let reused = score_with(true);
        let old = &reused.scores().unwrap().old_logprobs;
        assert_eq!(&old[reused.tokens_of(0)], &[0.0, 0.0, 0.0, -0.5, -0.5], "generation's, untouched");
        let forced = &old[reused.tokens_of(1)];
        assert!(forced[2..].iter().all(|&x| x < 0.0 && x != -0.5), "a forward's: {forced:?}");
        assert!(reused.scores().unwrap().values.is_none() && reused.scores().unwrap().ref_logprobs.is_none());

        let fresh = score_with(false);
        let all = &fresh.scores().unwrap().old_logprobs;
        // The same forward either way, to the last digits a batch of another size can move
        // (libtorch's CPU kernels block a batch of one and of two differently on some CPUs).
        let again = &all[fresh.tokens_of(1)];
        assert!(
            again.iter().zip(forced).all(|(a, b)| (a - b).abs() <= 1e-5),
            "the same forward: {again:?} vs {forced:?}"
        );
        assert!(all[fresh.tokens_of(0)][3..].iter().all(|&x| x < 0.0 && x != -0.5));
        assert!(all[fresh.tokens_of(0)][..3].iter().all(|&x| x == 0.0), "prompt tokens are not scored");
    }
}
