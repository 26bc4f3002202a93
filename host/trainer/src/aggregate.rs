//! How per-token losses become one number.

use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LossAgg {
    /// Σ loss·mask / Σ mask over the whole batch: every token weighs the same.
    TokenMean,
    /// Mean over sequences of Σ_t loss·mask: long answers weigh more (Dr. GRPO style).
    SeqMeanTokenSum,
    /// Mean over sequences of the per-sequence token mean: every sequence weighs the same.
    SeqMeanTokenMean,
}

/// `loss` and `mask` are `[batch, tokens]`; `mask` is 0/1 (any float kind). Sequences with
/// no masked token contribute 0 rather than NaN.
pub fn aggregate(loss: &Tensor, mask: &Tensor, mode: LossAgg) -> Tensor {
    let mask = mask.to_kind(loss.kind());
    let masked = loss * &mask;
    match mode {
        LossAgg::TokenMean => masked.sum(loss.kind()) / mask.sum(loss.kind()).clamp_min(1.0),
        LossAgg::SeqMeanTokenSum => masked.sum_dim_intlist([-1i64].as_slice(), false, loss.kind()).mean(loss.kind()),
        LossAgg::SeqMeanTokenMean => {
            let per_seq = masked.sum_dim_intlist([-1i64].as_slice(), false, loss.kind())
                / mask.sum_dim_intlist([-1i64].as_slice(), false, loss.kind()).clamp_min(1.0);
            per_seq.mean(loss.kind())
        }
    }
}

/// Σ x·mask / Σ mask, for metrics: in f64 whatever the training precision.
pub(crate) fn masked_mean(x: &Tensor, mask: &Tensor) -> f64 {
    aggregate(&x.detach().to_kind(Kind::Double), mask, LossAgg::TokenMean).double_value(&[])
}
