//! Checkpoints in the run folder: `checkpoints/step-NNNNNN/` with the actor (HF layout), the
//! critic, optimizer moments and the trainer's counters. Written under a temporary name and
//! renamed when complete, so a run killed at any moment (even mid-save) resumes from the
//! last complete one.

use crate::optimizer::AdamW;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use vagen_dist::Ranks;
use vagen_model::{Model, ValueModel};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TrainerState {
    /// RL steps completed.
    pub step: usize,
    pub sft_steps_done: usize,
    /// Held-out success after SFT, before RL.
    pub start_success: Option<f64>,
    pub last_success: Option<f64>,
    /// The env build the run trained on (`name version sha256:…` of its plugin file), so a
    /// checkpoint says which env its figures came from (absent in older checkpoints).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
}

/// Writes a checkpoint: `checkpoints/step-NNNNNN/` (RL steps done) or, before RL,
/// `checkpoints/sft-NNNNNN/` (SFT steps done). Every file and folder is synced before the
/// rename that makes it complete, so a crash or power loss leaves the previous checkpoint
/// or this one, never a torn one; then all but the newest `keep_last` are deleted (0 keeps
/// all).
pub fn save(
    run_dir: &Path,
    state: &TrainerState,
    actor: &Model,
    critic: Option<(&ValueModel, &AdamW)>,
    actor_opt: &AdamW,
    keep_last: usize,
) -> Result<()> {
    let dir = run_dir.join("checkpoints");
    let name = match state {
        TrainerState { step: 0, sft_steps_done: n, .. } if *n > 0 => format!("sft-{n:06}"),
        _ => format!("step-{:06}", state.step),
    };
    let tmp = dir.join(format!(".{name}.partial"));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp)?;
    }
    std::fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    actor.save(&tmp.join("actor"))?;
    actor_opt.save(&tmp.join("actor_optim.safetensors"))?;
    if let Some((c, o)) = critic {
        c.save(&tmp.join("critic"))?;
        o.save(&tmp.join("critic_optim.safetensors"))?;
    }
    std::fs::write(tmp.join("state.json"), serde_json::to_string_pretty(state)?)?;
    sync_tree(&tmp).with_context(|| format!("syncing {}", tmp.display()))?;
    let last = dir.join(&name);
    // A checkpoint of the same name (a re-save) is moved aside, not deleted, until the new
    // one is in place.
    let old = dir.join(format!(".{name}.old"));
    if last.exists() {
        let _ = std::fs::remove_dir_all(&old);
        std::fs::rename(&last, &old)?;
    }
    std::fs::rename(&tmp, &last).with_context(|| format!("renaming {} to {}", tmp.display(), last.display()))?;
    std::fs::File::open(&dir)?.sync_all().with_context(|| format!("syncing {}", dir.display()))?;
    let _ = std::fs::remove_dir_all(&old);
    if keep_last > 0 {
        // Only ones older than this: a newer one (a checkpoint a resume passed over) is
        // neither counted nor deleted.
        let older: Vec<PathBuf> = complete(run_dir)?.into_iter().skip_while(|p| *p != last).skip(1).collect();
        for stale in older.into_iter().skip(keep_last - 1) {
            std::fs::remove_dir_all(&stale).with_context(|| format!("removing {}", stale.display()))?;
        }
    }
    Ok(())
}

/// [`save`] by rank 0 of `ranks`, once every rank has helped put the optimisers' sharded
/// moments (`optim.shard`) back together: a checkpoint holds them whole.
pub(crate) fn save_ranked(
    ranks: &Ranks,
    run_dir: &Path,
    state: &TrainerState,
    actor: &Model,
    critic: Option<(&ValueModel, &AdamW)>,
    actor_opt: &AdamW,
    keep_last: usize,
) -> Result<()> {
    let whole_actor_opt = actor_opt.unsharded(ranks)?;
    let whole_critic_opt = critic.map(|(_, o)| o.unsharded(ranks)).transpose()?.flatten();
    if !ranks.is_main() {
        return Ok(());
    }
    let critic = critic.map(|(c, o)| (c, whole_critic_opt.as_ref().unwrap_or(o)));
    save(run_dir, state, actor, critic, whole_actor_opt.as_ref().unwrap_or(actor_opt), keep_last)
}

/// Syncs every file under `dir`, then the folders themselves.
fn sync_tree(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            sync_tree(&path)?;
        } else {
            std::fs::File::open(&path)?.sync_all()?;
        }
    }
    std::fs::File::open(dir)?.sync_all()
}

/// The complete checkpoints (those with a `state.json`), newest first: RL steps after
/// SFT steps, more steps after fewer.
pub fn complete(run_dir: &Path) -> Result<Vec<PathBuf>> {
    let dir = run_dir.join("checkpoints");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(Vec::new());
    };
    let mut found: Vec<((u8, usize), PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let key = match (name.strip_prefix("step-"), name.strip_prefix("sft-")) {
                (Some(n), _) => (1, n.parse().ok()?),
                (_, Some(n)) => (0, n.parse().ok()?),
                _ => return None,
            };
            e.path().join("state.json").is_file().then(|| (key, e.path()))
        })
        .collect();
    found.sort_by(|a, b| b.0.cmp(&a.0));
    Ok(found.into_iter().map(|(_, p)| p).collect())
}

/// The newest complete checkpoint.
pub fn latest(run_dir: &Path) -> Result<Option<PathBuf>> {
    Ok(complete(run_dir)?.into_iter().next())
}

pub fn read_state(ckpt: &Path) -> Result<TrainerState> {
    let path = ckpt.join("state.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not a trainer state", path.display()))
}
