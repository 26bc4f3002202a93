//! `[model]` (the actor: weights, precision, device, LoRA) and `[critic]`.

use crate::config_error::{ConfigError, invalid};
use serde::{Deserialize, Serialize};
use vagen_model::{DType, DeviceChoice, ModelSource};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelSection {
    /// A Hugging Face folder (Qwen2 or Qwen2.5-VL; relative to the config file's folder),
    /// `default` (the embedded small model, built from `schedule.seed`, or `default@SEED`)
    /// or `default-vl` (its VL sibling).
    pub path: ModelSource,
    /// f32, bf16 or f16 parameters.
    pub dtype: DType,
    /// auto, cpu, cuda, cuda:N.
    pub device: DeviceChoice,
    /// Keep a VL model's vision tower fixed (false: trained with the rest, as VAGEN does).
    /// With LoRA it applies to the tower's adapters, if `target_modules` gives it any.
    pub freeze_vision: bool,
    /// `[model.lora]`: train LoRA adapters (PEFT's settings and names, see
    /// `vagen_model::LoraConfig`) over the frozen model instead of every weight. The actor's
    /// checkpoints then hold the adapter in PEFT's layout; a critic is its own adapter and
    /// head over the same base; `engine.merge_lora` generates from a merged copy.
    pub lora: Option<vagen_model::LoraConfig>,
    /// Logits from an f32 copy of the LM head over f32 hidden states, in generation and in
    /// training alike, whatever `dtype`: the softmax's inputs lose no bits to bf16 rounding
    /// (as slime and verl offer). Costs the head's weights again in f32.
    pub lm_head_f32: bool,
}

impl Default for ModelSection {
    fn default() -> Self {
        ModelSection {
            path: embedded_model(),
            dtype: DType::F32,
            device: DeviceChoice::Auto,
            freeze_vision: false,
            lora: None,
            lm_head_f32: false,
        }
    }
}

impl ModelSection {
    /// `[model.lora]`'s settings, as PEFT would take them.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(lora) = &self.lora
            && let Err(e) = lora.check()
        {
            return invalid("model.lora", e.to_string());
        }
        Ok(())
    }
}

/// The embedded small model (`default`).
pub(super) fn embedded_model() -> ModelSource {
    ModelSource::Embedded { vision: false, seed: None }
}

/// The critic of the critic-based estimators (gae, bi-level-gae, turn-gae).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CriticSection {
    /// Where its transformer starts. `actor` (default): a copy of the actor's as RL begins
    /// (after SFT, if any) with a fresh value head, as verl builds its critic from the
    /// policy's weights: it starts from features that already read the prompts. `seed`: a
    /// trunk of the actor's shape drawn at random (N(0, initializer_range), as the embedded
    /// model) from `schedule.seed + 1`, sharing nothing with the actor. The head starts at
    /// zero either way (every value 0). A resumed run reloads its trained critic instead.
    pub init: CriticInit,
}

/// `critic.init`: see [`CriticSection::init`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CriticInit {
    #[default]
    Actor,
    Seed,
}
