//! A run continued from its newest checkpoint that loads whole: a corrupt one (a truncated
//! file, a disk error, a panic in libtorch) is moved aside with a warning, never half used.

use super::models::{load_actor, load_options, new_critic, vision_settings};
use super::{OpenEnv, Parts, assemble, join, open_env};
use crate::checkpoint::{self, TrainerState};
use crate::config::TrainConfig;
use crate::judge_access::JudgeAccess;
use crate::optimizer::AdamW;
use crate::run_lock::RunLock;
use anyhow::{Context, Result, bail};
use std::path::Path;
use vagen_dist::{Ranks, Rendezvous};
use vagen_model::{Model, ValueModel};
use vagen_runtime::Plugin;

/// The run in `run_dir` as one of `ranks` (every rank reads the same checkpoint, whatever
/// world size wrote it: checkpoints are whole), with what only the user's command line
/// grants: a native `env.plugin` and the judge's hosts and key.
pub(crate) fn resume_ranked(
    run_dir: &Path,
    overrides: &[String],
    allow_native: bool,
    judge_access: JudgeAccess,
    rdzv: Option<&Rendezvous>,
) -> Result<Parts> {
    let path = run_dir.join("config.toml");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut cfg = TrainConfig::parse(&text, &path.display().to_string(), overrides)?;
    cfg.allow_native = allow_native;
    cfg.judge_access = judge_access;
    let ranks = join(&mut cfg, rdzv)?;
    let lock = if ranks.is_main() { Some(RunLock::acquire(run_dir)?) } else { None };
    let mut refused = Vec::new();
    let env = open_env(&cfg)?;
    for ckpt in checkpoint::complete(run_dir)? {
        // A panic in libtorch is a checkpoint that will not load, like a torn file.
        let plugin = env.plugin.as_deref();
        let loaded =
            vagen_model::catch_panic(|| Ok(load_checkpoint(&cfg, plugin, run_dir, &ckpt))).map_err(anyhow::Error::from);
        match loaded.and_then(|r| r) {
            Ok(loaded) => return continued(cfg, run_dir, lock, env, loaded, ranks, &ckpt),
            Err(e) => refused.push(set_aside(&ckpt, &format!("{e:#}"), ranks.is_main())),
        }
    }
    if refused.is_empty() {
        bail!(
            "{} has no complete checkpoint to resume from (the run stopped before its first): start it again \
             with `train --config {} --run-dir {} --restart`, which keeps its files aside",
            run_dir.display(),
            run_dir.join("config.toml").display(),
            run_dir.display()
        );
    }
    bail!("no checkpoint of {} loads: {}", run_dir.display(), refused.join("; "))
}

/// A checkpoint's actor, critic, counters and optimiser moments.
type Loaded = (Model, Option<ValueModel>, TrainerState, (AdamW, Option<AdamW>));

/// The run from the checkpoint `ckpt` that loaded, every rank at the same one; its
/// metrics log marked where it resumed.
fn continued(
    cfg: TrainConfig,
    run_dir: &Path,
    lock: Option<RunLock>,
    env: OpenEnv,
    (actor, critic, state, optims): Loaded,
    ranks: Ranks,
    ckpt: &Path,
) -> Result<Parts> {
    let p = assemble(cfg, run_dir, lock, env, actor, critic, state, Some(optims), ranks)?;
    crate::data_parallel::same_state(&p.ranks, (p.state.step, p.state.sft_steps_done), ckpt)?;
    // Appended, not rewritten: lines past the checkpoint stay, and readers take the ones
    // after this mark (`metrics::read`).
    if let Some(m) = &p.metrics {
        m.mark_resumed(&p.state)?;
    }
    if p.ranks.is_main() {
        eprintln!(
            "resuming {} at step {} ({} SFT steps done; checkpoint {})",
            run_dir.display(),
            p.state.step,
            p.state.sft_steps_done,
            ckpt.display()
        );
    }
    Ok(p)
}

/// A checkpoint that will not load (`error`), moved aside by rank 0 (kept for a look, so
/// later saves and resumes pass it by) with a warning; what the final error says of it.
fn set_aside(ckpt: &Path, error: &str, main: bool) -> String {
    let e = vagen_model::without_cpp_backtrace(error).to_string();
    let name = ckpt.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let aside = ckpt.with_file_name(format!(".{name}.corrupt"));
    let moved = main && std::fs::rename(ckpt, &aside).is_ok();
    let to = if moved { format!(", moved to {}", aside.display()) } else { String::new() };
    eprintln!("warning: {} will not load ({e}){to}; trying the one before", ckpt.display());
    format!("{}: {e}", ckpt.display())
}

/// A checkpoint's actor, critic, counters and optimiser moments, all or nothing.
fn load_checkpoint(cfg: &TrainConfig, plugin: Option<&dyn Plugin>, run_dir: &Path, ckpt: &Path) -> Result<Loaded> {
    let options = load_options(cfg)?;
    let state = checkpoint::read_state(ckpt)?;
    let mut actor = load_actor(cfg, plugin, run_dir, &ckpt.join("actor"))?;
    vision_settings(cfg, &mut actor)?;
    let mut actor_opt = AdamW::new(actor.trainable(), cfg.optim.weight_decay);
    actor_opt.load(&ckpt.join("actor_optim.safetensors")).map_err(anyhow::Error::msg)?;
    // The critic starts at RL: a checkpoint from before it (SFT) has none to load; one from
    // RL without it is incomplete.
    let has_critic = ckpt.join("critic").is_dir();
    if cfg.algorithm.advantage.estimator.uses_critic() && state.step > 0 && !has_critic {
        anyhow::bail!("it has no critic/ folder, and RL has trained one");
    }
    let (critic, critic_opt) = if cfg.algorithm.advantage.estimator.uses_critic() && has_critic {
        let critic = match cfg.model.lora {
            Some(_) => ValueModel::load_sharing(&actor, &ckpt.join("critic"))?,
            None => ValueModel::load(&ckpt.join("critic"), options)?,
        };
        let mut opt = AdamW::new(critic.trainable(), cfg.optim.weight_decay);
        opt.load(&ckpt.join("critic_optim.safetensors")).map_err(anyhow::Error::msg)?;
        (Some(critic), Some(opt))
    } else {
        // None with `sft.full` before RL: the critic comes with the adapters.
        let critic = new_critic(cfg, &actor)?;
        let opt = critic.as_ref().map(|c| AdamW::new(c.trainable(), cfg.optim.weight_decay));
        (critic, opt)
    };
    Ok((actor, critic, state, (actor_opt, critic_opt)))
}
