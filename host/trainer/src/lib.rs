//! vagen-trainer: the update side of training. For now the PPO-family losses, written in
//! the order of the paper, over `[batch, tokens]` tensors with a 0/1 loss mask.

mod aggregate;
mod policy_loss;
mod value_loss;

pub use aggregate::{LossAgg, aggregate};
pub use policy_loss::{KlKind, KlPenalty, PolicyLoss, PolicyLossConfig, PolicyLossInput, policy_loss};
pub use value_loss::{ValueLoss, ValueLossConfig, explained_variance, value_loss};

/// A scalar tensor as f64, for metrics.
pub(crate) fn scalar(t: &tch::Tensor) -> f64 {
    t.double_value(&[])
}
