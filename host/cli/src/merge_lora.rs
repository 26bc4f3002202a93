//! `vagen-host merge-lora`: a base model with a LoRA adapter merged into its weights, saved
//! as a whole Hugging Face checkpoint (what PEFT's `merge_and_unload()` then
//! `save_pretrained` gives).

use anyhow::{Context, Result, bail};
use clap::Args;
use std::path::{Path, PathBuf};
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
    /// Where the merged checkpoint goes: a new or empty folder, not the base, the adapter or
    /// inside either (however spelled: links and `..` are resolved first).
    #[arg(long)]
    out: PathBuf,
    /// Replace `--out` when it already holds files (the new checkpoint is written beside it
    /// first, then takes its place).
    #[arg(long)]
    force: bool,
    /// Precision of the merged weights (the merge itself is computed in f32).
    #[arg(long, default_value = "f32")]
    dtype: DType,
}

pub fn merge_lora(a: MergeLoraArgs) -> Result<()> {
    let out = check_out(&a)?;
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
    // Written whole beside `--out`, then renamed into place: a failure leaves no half
    // checkpoint, and a replaced one is removed only once the new one is there.
    let parent = out.parent().context("--out has no parent folder")?;
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    let staging = tempfile::Builder::new().prefix(".merge-lora-").tempdir_in(parent)?;
    let written = staging.path().join("model");
    merged.save(&written).with_context(|| format!("writing {}", written.display()))?;
    if out.exists() {
        let old = staging.path().join("replaced");
        std::fs::rename(&out, &old).with_context(|| format!("moving the old {} aside", out.display()))?;
    }
    std::fs::rename(&written, &out).with_context(|| format!("moving the checkpoint to {}", out.display()))?;
    println!("merged the adapter into {layers} weights of {}: {}", a.base, a.out.display());
    Ok(())
}

/// `--out` resolved, or the refusal of one that is, or lies inside, the base or the adapter
/// folder (compared after links and `..` are resolved), or that holds files unless `--force`.
fn check_out(a: &MergeLoraArgs) -> Result<PathBuf> {
    let out = resolved(&a.out)?;
    let mut inputs = vec![("adapter", resolved(&a.adapter)?)];
    if let ModelSource::Folder(d) = &a.base {
        inputs.push(("base", resolved(d)?));
    }
    for (what, input) in inputs {
        if out.starts_with(&input) {
            let place = if out == input { "is" } else { "lies inside" };
            bail!("--out {}: {place} the {what} folder {}; name a new folder", a.out.display(), input.display());
        }
    }
    let holds_files = std::fs::read_dir(&out).map(|mut d| d.next().is_some()).unwrap_or(false);
    if out.exists() && !out.is_dir() {
        bail!("--out {}: is a file, not a folder", a.out.display());
    }
    if holds_files && !a.force {
        bail!("--out {}: already holds files; name a new folder, or pass --force to replace it", a.out.display());
    }
    Ok(out)
}

/// `p` as the file system will resolve it: component by component, each link followed
/// (`canonicalize`) while the path exists, and `..` taken from the resolved path, as the
/// kernel takes it.
fn resolved(p: &Path) -> Result<PathBuf> {
    use std::path::Component;
    let absolute = std::path::absolute(p).with_context(|| format!("{}", p.display()))?;
    let mut real = PathBuf::new();
    for c in absolute.components() {
        match c {
            Component::ParentDir => {
                real.pop();
            }
            Component::CurDir => {}
            other => {
                real.push(other);
                if let Ok(r) = real.canonicalize() {
                    real = r;
                }
            }
        }
    }
    Ok(real)
}
