//! `--model`, `--device` and `--dtype`, shared by the commands that run a language model:
//! parsed here, once, into a [`ModelSpec`].

use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;
use vagen_model::{DType, DeviceChoice, LoadOptions, Model, ModelSource, ModelSpec};

#[derive(Args, Clone)]
pub struct ModelArgs {
    /// A Hugging Face model folder (config.json, *.safetensors, tokenizer files), or
    /// `default` for the small embedded model built from a seed (no download; `default@7`
    /// for another seed), or `default-vl` for its VL sibling; or a LoRA adapter folder
    /// (PEFT's layout, e.g. a LoRA run's `checkpoints/step-N/actor`) over the base it names.
    #[arg(long, default_value = "default")]
    pub model: ModelSource,
    /// A LoRA adapter folder (PEFT's `adapter_config.json` + `adapter_model.safetensors`,
    /// ours or PEFT's) over `--model`.
    #[arg(long)]
    pub adapter: Option<PathBuf>,
    /// `auto` (a GPU when libtorch sees one), `cpu`, `cuda` or `cuda:N`.
    #[arg(long, default_value = "auto")]
    pub device: DeviceChoice,
    /// Parameter precision: f32, bf16 or f16.
    #[arg(long, default_value = "f32")]
    pub dtype: DType,
}

impl ModelArgs {
    pub fn spec(&self) -> ModelSpec {
        ModelSpec { source: self.model.clone(), adapter: self.adapter.clone(), device: self.device, dtype: self.dtype }
    }

    pub fn options(&self) -> Result<LoadOptions> {
        Ok(self.spec().options()?)
    }

    pub fn load(&self) -> Result<Model> {
        self.spec().load().with_context(|| format!("loading model {}", self.model))
    }
}
