//! `--model`, `--device` and `--dtype`, shared by the commands that run a language model.

use anyhow::{Context, Result};
use clap::Args;
use vagen_model::{DType, LoadOptions, Model};

#[derive(Args, Clone)]
pub struct ModelArgs {
    /// A Hugging Face model folder (config.json, *.safetensors, tokenizer files), or
    /// `default` for the small embedded model built from a seed (no download).
    #[arg(long, default_value = "default")]
    pub model: String,
    /// `auto` (a GPU when libtorch sees one), `cpu`, `cuda` or `cuda:N`.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Parameter precision: f32, bf16 or f16.
    #[arg(long, default_value = "f32")]
    pub dtype: String,
}

impl ModelArgs {
    pub fn options(&self) -> Result<LoadOptions> {
        Ok(LoadOptions { device: vagen_model::parse_device(&self.device)?, dtype: self.dtype.parse::<DType>()? })
    }

    pub fn load(&self) -> Result<Model> {
        Model::from_spec(&self.model, self.options()?).with_context(|| format!("loading model {}", self.model))
    }
}
