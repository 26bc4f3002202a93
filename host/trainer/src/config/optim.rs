//! `[optim]` (AdamW, learning rates, batch sizes), `[schedule]` (steps, evaluation,
//! checkpoints, the seed) and `[sft]` (the supervised warm start).

use crate::config_error::{ConfigError, Range, in_ranges, invalid};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OptimSection {
    /// AdamW learning rate of the policy (RAGEN 1e-6 for 0.5B; a small model wants more).
    pub actor_lr: f64,
    /// AdamW learning rate of the critic (RAGEN 1e-5).
    pub critic_lr: f64,
    pub weight_decay: f64,
    /// Steps of linear learning-rate warm-up.
    pub warmup_steps: usize,
    /// The learning rate over the RL steps after warm-up: `constant`, or `linear` down to
    /// 0 at `schedule.steps` (CleanRL's `anneal_lr`).
    pub lr_schedule: LrSchedule,
    /// Sequences per optimizer step.
    pub mini_batch: usize,
    /// Sequences per forward/backward (gradients accumulate over a mini-batch).
    pub micro_batch: usize,
    /// Padded tokens (sequences × the longest) per forward/backward as well, when above 0:
    /// a micro-batch closes at whichever limit comes first, so a few long sequences do not
    /// take the memory of `micro_batch` of them. A sequence over the budget goes alone.
    pub micro_batch_tokens: usize,
    /// Passes over each step's batch.
    pub epochs: usize,
    /// Global gradient-norm clip (1.0); a non-finite norm skips the step.
    pub grad_clip: f64,
    /// With several data-parallel ranks, each keeps AdamW's moments for 1/N of the
    /// parameters (ZeRO-1): the same update, a fraction of the optimiser's memory.
    pub shard: bool,
}

impl Default for OptimSection {
    fn default() -> Self {
        OptimSection {
            actor_lr: 1e-6,
            critic_lr: 1e-5,
            weight_decay: 0.0,
            warmup_steps: 0,
            lr_schedule: LrSchedule::Constant,
            mini_batch: 32,
            micro_batch: 8,
            micro_batch_tokens: 0,
            epochs: 1,
            grad_clip: 1.0,
            shard: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LrSchedule {
    Constant,
    Linear,
}

impl OptimSection {
    /// The factor on both learning rates at 0-based RL `step` of `steps`: warm-up ramps
    /// it to 1, `linear` then takes it down so that the step after the last would be at 0.
    pub fn lr_scale(&self, step: usize, steps: usize) -> f64 {
        let warm = if self.warmup_steps > 0 { ((step + 1) as f64 / self.warmup_steps as f64).min(1.0) } else { 1.0 };
        match self.lr_schedule {
            LrSchedule::Constant => warm,
            LrSchedule::Linear => warm * (1.0 - step as f64 / steps.max(1) as f64).max(0.0),
        }
    }

    /// Micro-batches that divide a mini-batch, at least one epoch, and step sizes in range
    /// (the critic's is checked with the estimator that uses it).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.micro_batch == 0 || self.mini_batch == 0 || !self.mini_batch.is_multiple_of(self.micro_batch) {
            return invalid("optim.micro_batch", format!("must divide optim.mini_batch ({})", self.mini_batch));
        }
        if self.epochs == 0 {
            return invalid("optim.epochs", "must be at least 1".into());
        }
        in_ranges([
            ("optim.actor_lr", self.actor_lr, Range::LearningRate),
            ("optim.weight_decay", self.weight_decay, Range::Unit),
            ("optim.grad_clip", self.grad_clip, Range::PositiveScale),
        ])
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScheduleSection {
    /// RL steps (RAGEN 200).
    pub steps: usize,
    /// Evaluate every k steps (0: only before and after).
    pub eval_every: usize,
    /// Checkpoint every k steps (0: only at the end).
    pub save_every: usize,
    /// Checkpoints kept in the run folder, the newest; older ones are deleted after each
    /// save. 0 keeps them all. Keep at least 2: a resume falls back to the previous one when
    /// the newest will not load.
    pub keep_last: usize,
    /// Seeds everything: weights of the default model, sampling, shuffling.
    pub seed: u64,
}

impl Default for ScheduleSection {
    fn default() -> Self {
        ScheduleSection { steps: 200, eval_every: 10, save_every: 50, keep_last: 0, seed: 0 }
    }
}

/// Supervised warm start on the env's oracle trajectories, through the same rollout path,
/// or on a file of conversations (`data`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SftSection {
    /// Optimizer steps; 0 skips SFT.
    pub steps: usize,
    pub lr: f64,
    /// Oracle episodes per step, or conversations of `data` per step.
    pub episodes_per_step: usize,
    /// Conversations in OpenAI's chat format, one JSON object a line (`{"messages": [...],
    /// "tools": [...]}`), to learn instead of the oracle's episodes: the loss on the
    /// assistant messages only (`chat_data.rs`). Relative to the config file's folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<std::path::PathBuf>,
    /// Probability that an oracle answer is replaced by a random one (more varied data, and
    /// a warm start that leaves RL something to improve).
    pub action_noise: f64,
    /// 0: fresh episodes every step. n: the episodes of the first n steps, cycled (a fixed
    /// dataset, e.g. to check that the model can fit it, or to play a slow simulator once):
    /// played once and kept in memory.
    pub dataset_steps: usize,
    /// Checkpoint every k SFT steps (`checkpoints/sft-NNNNNN/`) and when SFT ends, so a
    /// run killed during a long warm start resumes there; 0: only when SFT ends.
    pub save_every: usize,
    /// With `[model.lora]`: SFT trains every weight, then RL trains the adapters over the
    /// fine-tuned model, saved once as `RUN_DIR/base/` (the adapters name it as their base).
    /// A pretrained model already knows the format; the embedded one's random weights do
    /// not, and adapters over them cannot sharpen it enough to learn from sampled answers.
    pub full: bool,
}

impl Default for SftSection {
    fn default() -> Self {
        SftSection {
            steps: 0,
            lr: 1e-4,
            episodes_per_step: 16,
            data: None,
            action_noise: 0.0,
            dataset_steps: 0,
            save_every: 20,
            full: false,
        }
    }
}

impl SftSection {
    /// A noise probability and a learning rate.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(0.0..=1.0).contains(&self.action_noise) {
            return invalid("sft.action_noise", format!("{} is not a probability", self.action_noise));
        }
        if self.data.is_some() && (self.action_noise > 0.0 || self.dataset_steps > 0) {
            return invalid(
                "sft.data",
                "conversations from a file are learnt as they are: action_noise and dataset_steps are the oracle's"
                    .into(),
            );
        }
        in_ranges([("sft.lr", self.lr, Range::LearningRate)])
    }
}
