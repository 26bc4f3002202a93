//! `vagen-host merge-lora`: a base model with a LoRA adapter merged into its weights, saved
//! as a whole Hugging Face checkpoint (what PEFT's `merge_and_unload()` then
//! `save_pretrained` gives).

use anyhow::{Context, Result, bail};
use clap::Args;
use std::path::PathBuf;
use vagen_model::{DType, LoadOptions, ModelSource};

#[derive(Args)]
pub struct MergeLoraArgs {
    /// The base model: a Hugging Face folder, `default` or `default-vl` (with `@SEED`).
    #[arg(long)]
    base: ModelSource,
    /// The adapter folder (`adapter_config.json` + `adapter_model.safetensors`, ours or
    /// PEFT's).
    #[arg(long)]
    adapter: PathBuf,
    /// Where the merged checkpoint goes (created; must not be the base or the adapter).
    #[arg(long)]
    out: PathBuf,
    /// Precision of the merged weights (the merge itself is computed in f32).
    #[arg(long, default_value = "f32")]
    dtype: DType,
}

pub fn merge_lora(a: MergeLoraArgs) -> Result<()> {
    let same = |p: &std::path::Path| std::path::absolute(p).ok() == std::path::absolute(&a.out).ok();
    if same(&a.adapter) || matches!(&a.base, ModelSource::Folder(d) if same(d)) {
        bail!("--out {}: would overwrite its own input; name a new folder", a.out.display());
    }
    // Loaded in f32 so the merge sums at full precision, then cast once.
    let model = a
        .base
        .load_with_adapter(&a.adapter, vagen_model::DEFAULT_SEED, LoadOptions::default())
        .with_context(|| format!("loading {} with the adapter {}", a.base, a.adapter.display()))?;
    let layers = model.merged_weights().len();
    let mut merged = model.merged()?;
    if a.dtype != DType::F32 {
        merged = merged.to_dtype(a.dtype)?;
    }
    merged.save(&a.out).with_context(|| format!("writing {}", a.out.display()))?;
    println!("merged the adapter into {layers} weights of {}: {}", a.base, a.out.display());
    Ok(())
}
