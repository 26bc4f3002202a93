//! vagen-trainer: the PPO-family losses (in the order of the paper, over `[batch, tokens]`
//! tensors with a 0/1 loss mask) and the training loop around them: SFT warm start, RL
//! steps, evaluation, checkpoints, metrics and the run report.
//!
//! An RL step is one [`StepBatch`] going through five phases, a file each: `collect`
//! (rollouts → batch), `score` (old / reference log-probs, values), `credit`
//! (`assign_credit`: rewards → advantages), `update` (PPO epochs over micro-batches) and
//! `log` (metrics).

mod aggregate;
mod checkpoint;
mod collect;
mod config;
mod credit;
mod data_parallel;
mod generator;
mod judge_access;
mod log;
mod metrics;
mod micro;
mod openai_judge;
mod optimizer;
mod policy_loss;
mod progress;
mod report;
mod rewards;
mod rollout_section;
mod run_lock;
mod score;
mod shard;
mod step_batch;
mod tensorboard;
mod train;
mod update;
mod value_loss;
mod vocabulary;
mod warnings;

pub use aggregate::{LossAgg, aggregate};
pub use checkpoint::{TrainerState, latest as latest_checkpoint};
pub use config::{ConfigError, CriticInit, TrainConfig};
pub use generator::AsyncSection;
pub use judge_access::JudgeAccess;
pub use metrics::{StepMetrics, read as read_metrics};
pub use openai_judge::{OpenAiJudge, OpenAiOptions};
pub use optimizer::AdamW;
pub use policy_loss::{
    Behaviour, KlKind, KlPenalty, OffPolicy, PolicyLoss, PolicyLossConfig, PolicyLossInput, policy_loss,
};
pub use rollout_section::{RolloutSection, SequenceConfig};
pub use step_batch::{CreditColumns, ScoreColumns, SeqColumns, StepBatch, TokenColumns, TurnColumns};
pub use train::{Trainer, held_out_rollouts, load_model};
pub use vagen_dist::{Ranks, Rendezvous};
pub use value_loss::{ValueLoss, ValueLossConfig, explained_variance, value_loss};

/// A scalar tensor as f64, for metrics.
pub(crate) fn scalar(t: &tch::Tensor) -> f64 {
    t.double_value(&[])
}
