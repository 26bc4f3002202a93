//! vagen-trainer: the PPO-family losses (in the order of the paper, over `[batch, tokens]`
//! tensors with a 0/1 loss mask) and the training loop around them: SFT warm start, RL
//! steps, evaluation, checkpoints, metrics and the run report.
//!
//! The modules import in one direction. `train` (the `Trainer`) is the run loop: it has
//! `setup` build the run (ranks, env, actor, critic, LoRA, optimisers; new, or from a
//! checkpoint), then calls the phases, each a module of functions with data in and data
//! out. An RL step is one [`StepBatch`] going through five of them: `collect` (rollouts →
//! batch), `score` (old / reference log-probs, values), `credit` (`assign_credit`: rewards →
//! advantages), `update` (PPO epochs over micro-batches) and `log` (metrics); `sft` (the
//! warm start's step), `evaluate` (held-out episodes) and `checkpoint` go around them. Below
//! the phases: `play` (episodes as a run plays them), `generator` (`[async]` rollouts on a
//! thread), `config` (each section validating itself), the losses, the optimiser and the
//! data-parallel collectives. No phase imports the loop or the set-up.

mod aggregate;
mod async_section;
mod chat_data;
mod checkpoint;
mod collect;
mod config;
mod config_error;
mod credit;
mod data_parallel;
mod evaluate;
mod generator;
mod harness;
mod judge_access;
mod log;
mod metrics;
mod micro;
mod openai_judge;
mod optimizer;
mod play;
mod policy_loss;
mod progress;
mod report;
mod rewards;
mod rollout_section;
mod run_lock;
mod score;
mod setup;
mod sft;
mod step_batch;
mod tensorboard;
mod token_versions;
mod train;
mod update;
mod value_loss;
mod vocabulary;
mod warnings;

pub use aggregate::{LossAgg, aggregate};
pub use async_section::AsyncSection;
pub use checkpoint::{TrainerState, latest as latest_checkpoint};
pub use config::{CriticInit, OffPolicyChoice, TrainConfig};
pub use config_error::ConfigError;
pub use harness::{harness_trajectories, held_out_harness};
pub use judge_access::JudgeAccess;
pub use metrics::{StepMetrics, read as read_metrics};
pub use openai_judge::{OpenAiJudge, OpenAiOptions};
pub use optimizer::AdamW;
pub use play::{held_out_policy, held_out_shape};
pub use policy_loss::{
    Behaviour, KlKind, KlPenalty, OffPolicy, PolicyLoss, PolicyLossConfig, PolicyLossInput, policy_loss,
};
pub use progress::Progress;
pub use rollout_section::{ReuseLogprobs, RolloutSection, SequenceConfig};
pub use run_lock::set_aside as set_run_aside;
pub use setup::load_model;
pub use step_batch::{CreditColumns, ScoreColumns, SeqColumns, StepBatch, TokenColumns, TurnColumns};
pub use train::Trainer;
pub use vagen_dist::{Ranks, Rendezvous};
pub use value_loss::{ValueLoss, ValueLossConfig, explained_variance, value_loss};

/// A scalar tensor as f64, for metrics.
pub(crate) fn scalar(t: &tch::Tensor) -> f64 {
    t.double_value(&[])
}
