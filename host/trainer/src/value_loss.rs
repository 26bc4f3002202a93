//! The critic's clipped value loss and the explained-variance metric.

use crate::aggregate::{LossAgg, aggregate, masked_mean};
use crate::scalar;
use serde::{Deserialize, Serialize};
use tch::Tensor;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ValueLossConfig {
    /// New values may move at most this far from the old ones before the clipped term takes
    /// over (0.5).
    pub clip: f64,
    pub aggregation: LossAgg,
}

impl Default for ValueLossConfig {
    fn default() -> Self {
        Self { clip: 0.5, aggregation: LossAgg::TokenMean }
    }
}

pub struct ValueLoss {
    pub loss: Tensor,
    pub value_loss: f64,
    /// Share of masked tokens where the clipped term was the larger.
    pub clip_frac: f64,
}

/// ½·max((v − R)², (clip(v, v_old ± clip) − R)²), aggregated over `mask` ([batch, tokens]).
pub fn value_loss(
    cfg: &ValueLossConfig,
    values: &Tensor,
    old_values: &Tensor,
    returns: &Tensor,
    mask: &Tensor,
) -> ValueLoss {
    let mask = mask.to_kind(values.kind());
    let old = old_values.detach();
    let returns = returns.detach();
    let clipped = &old + (values - &old).clamp(-cfg.clip, cfg.clip);
    let plain_err = (values - &returns).square();
    let clipped_err = (clipped - &returns).square();
    let clip_frac = masked_mean(&clipped_err.gt_tensor(&plain_err), &mask);
    let loss = aggregate(&plain_err.maximum(&clipped_err), &mask, cfg.aggregation) * 0.5;
    ValueLoss { value_loss: scalar(&loss), loss, clip_frac }
}

/// 1 − Var(R − v) / Var(R) over the given positions (the value mask's): 1 is a perfect
/// critic, 0 no better than a constant, negative worse. NaN when the returns do not vary.
pub fn explained_variance(values: &[f64], returns: &[f64]) -> f64 {
    let var = |x: &[f64]| {
        let m = x.iter().sum::<f64>() / x.len() as f64;
        x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / x.len() as f64
    };
    let residual: Vec<f64> = returns.iter().zip(values).map(|(r, v)| r - v).collect();
    1.0 - var(&residual) / var(returns)
}
