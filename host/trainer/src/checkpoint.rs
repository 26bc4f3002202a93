//! Checkpoints in the run folder: `checkpoints/step-NNNNNN/` with the actor (HF layout), the
//! critic, optimizer moments and the trainer's counters. Written under a temporary name and
//! renamed when complete, so a run killed at any moment (even mid-save) resumes from the
//! last complete one.

use crate::optimizer::AdamW;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use vagen_model::{Model, ValueModel};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TrainerState {
    /// RL steps completed.
    pub step: usize,
    pub sft_steps_done: usize,
    /// Held-out success after SFT, before RL.
    pub start_success: Option<f64>,
    pub last_success: Option<f64>,
}

pub fn save(
    run_dir: &Path,
    state: &TrainerState,
    actor: &Model,
    critic: Option<&ValueModel>,
    actor_opt: &AdamW,
    critic_opt: Option<&AdamW>,
) -> Result<()> {
    let dir = run_dir.join("checkpoints");
    let name = format!("step-{:06}", state.step);
    let tmp = dir.join(format!(".{name}.partial"));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp)?;
    }
    std::fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    actor.save(&tmp.join("actor"))?;
    actor_opt.save(&tmp.join("actor_optim.safetensors"))?;
    if let (Some(c), Some(o)) = (critic, critic_opt) {
        c.save(&tmp.join("critic"))?;
        o.save(&tmp.join("critic_optim.safetensors"))?;
    }
    std::fs::write(tmp.join("state.json"), serde_json::to_string_pretty(state)?)?;
    let last = dir.join(&name);
    if last.exists() {
        std::fs::remove_dir_all(&last)?;
    }
    std::fs::rename(&tmp, &last).with_context(|| format!("renaming {} to {}", tmp.display(), last.display()))?;
    Ok(())
}

/// The complete checkpoint with the highest step.
pub fn latest(run_dir: &Path) -> Result<Option<PathBuf>> {
    let dir = run_dir.join("checkpoints");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(None);
    };
    let newest = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let step: usize = name.strip_prefix("step-")?.parse().ok()?;
            e.path().join("state.json").is_file().then(|| (step, e.path()))
        })
        .max_by_key(|(step, _)| *step);
    Ok(newest.map(|(_, p)| p))
}

pub fn read_state(ckpt: &Path) -> Result<TrainerState> {
    let path = ckpt.join("state.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not a trainer state", path.display()))
}
