//! Everything a run is built from before its first step, in one place: the ranks joined,
//! the run folder and its lock, the env, the actor (its tokenizer, vision settings and LoRA
//! adapters), the critic, the optimisers and the reward functions, for a new run
//! ([`new_ranked`]) or from a checkpoint ([`resume_ranked`]). The run loop turns the
//! [`Parts`] into a `Trainer`; no phase reads this module.

mod models;
mod resume;

pub use models::load_model;
pub(crate) use models::{adapters_over_sft, generator_model, merged_copy, new_critic, new_optimizer, reference};
pub(crate) use resume::resume_ranked;

use crate::checkpoint::TrainerState;
use crate::config::TrainConfig;
use crate::metrics::MetricsLog;
use crate::optimizer::AdamW;
use crate::rewards::Rewards;
use crate::run_lock::{RunLock, check_new_run_folder};
use anyhow::{Context, Result, bail};
use models::{attach_lora, embedded_texts, load_model_with};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use vagen_dist::{Ranks, Rendezvous};
use vagen_model::{Model, ValueModel};
use vagen_runtime::{Plugin, Runtime};

/// A run ready to train, in the order the trainer holds (and drops) it.
pub(crate) struct Parts {
    pub cfg: TrainConfig,
    pub run_dir: PathBuf,
    /// `None` for a harness run.
    pub plugin: Option<Arc<dyn Plugin>>,
    pub actor: Model,
    /// With `engine.merge_lora`: the actor with its adapters merged.
    pub merged: Option<Model>,
    pub critic: Option<ValueModel>,
    pub actor_opt: AdamW,
    pub critic_opt: Option<AdamW>,
    pub state: TrainerState,
    /// Rank 0's: the other ranks write no files.
    pub metrics: Option<MetricsLog>,
    pub ranks: Ranks,
    pub runtime: Runtime,
    pub rewards: Rewards,
    /// Rank 0's hold on the run folder.
    pub lock: Option<RunLock>,
}

/// A new run in `run_dir` as one of the ranks `rdzv` describes (none: one process): rank
/// 0 makes and writes the run folder.
pub(crate) fn new_ranked(mut cfg: TrainConfig, run_dir: &Path, rdzv: Option<&Rendezvous>) -> Result<Parts> {
    let ranks = join(&mut cfg, rdzv)?;
    let created = ranks.is_main() && !run_dir.exists();
    let built = build(cfg, run_dir, ranks);
    if built.is_err() && created {
        // Refused (a model that does not load, an env config the plugin rejects): no
        // empty run folder is left behind.
        let _ = std::fs::remove_dir_all(run_dir);
    }
    built
}

fn build(cfg: TrainConfig, run_dir: &Path, ranks: Ranks) -> Result<Parts> {
    let lock = match ranks.is_main() {
        true => {
            if run_dir.join("config.toml").exists() {
                if crate::checkpoint::complete(run_dir)?.is_empty() {
                    bail!(
                        "{} holds a run that stopped before its first complete checkpoint, so --resume has \
                         nothing to continue: start it again with --restart (its files are kept aside, in \
                         a sibling folder), or choose another --run-dir",
                        run_dir.display()
                    );
                }
                bail!(
                    "{} already holds a run: resume it with --resume, start it again with --restart (its \
                     files are kept aside), or choose another --run-dir",
                    run_dir.display()
                );
            }
            check_new_run_folder(run_dir)?;
            std::fs::create_dir_all(run_dir).with_context(|| format!("creating {}", run_dir.display()))?;
            Some(RunLock::acquire(run_dir)?)
        }
        false => None,
    };
    let mut cfg = cfg;
    cfg.pin_components()?;
    let env = open_env(&cfg)?;
    let texts = embedded_texts(&cfg, env.plugin.as_deref())?;
    let mut actor = load_model_with(&cfg, texts.as_ref())?;
    if let Some(texts) = &texts
        && !cfg.max_new_tokens_given
        && let Some(n) = crate::vocabulary::max_new_tokens_for(&actor, texts)?
    {
        // Written to the run's config.toml, so a resumed run keeps it.
        cfg.rollout.sampling.max_new_tokens = n;
    }
    attach_lora(&cfg, &mut actor)?;
    let critic = new_critic(&cfg, &actor)?;
    let parts = assemble(cfg, run_dir, lock, env, actor, critic, TrainerState::default(), None, ranks)?;
    // Written once everything it names has loaded and been accepted, so a folder with a
    // config.toml always holds a run that can be resumed (or restarted elsewhere).
    if parts.ranks.is_main() {
        let built = parts.state.env.as_deref().unwrap_or_default();
        std::fs::write(run_dir.join("config.toml"), format!("# env: {built}\n{}", parts.cfg.to_toml()))?;
    }
    Ok(parts)
}

/// The optimisers (fresh, or a checkpoint's `optims`), cut to this rank's share with
/// `optim.shard`; the merged copy, the metrics log and the reward functions.
#[allow(clippy::too_many_arguments)]
fn assemble(
    cfg: TrainConfig,
    run_dir: &Path,
    lock: Option<RunLock>,
    env: OpenEnv,
    actor: Model,
    critic: Option<ValueModel>,
    state: TrainerState,
    optims: Option<(AdamW, Option<AdamW>)>,
    ranks: Ranks,
) -> Result<Parts> {
    crate::data_parallel::same_config(&ranks, &cfg.to_toml())?;
    tch::manual_seed(cfg.schedule.seed as i64);
    let OpenEnv { runtime, plugin } = env;
    let mut state = state;
    let built = match (&plugin, &cfg.env.harness) {
        (Some(p), _) => env_build(p.as_ref()),
        (None, Some(h)) => format!("harness {}", h.command.join(" ")),
        (None, None) => unreachable!("a run has a plugin or a harness"),
    };
    state.env = Some(built.clone());
    let (mut actor_opt, mut critic_opt) = optims.unwrap_or_else(|| {
        let actor_opt = new_optimizer(&cfg, actor.trainable(), &ranks);
        (actor_opt, critic.as_ref().map(|c| new_optimizer(&cfg, c.trainable(), &ranks)))
    });
    // A checkpoint's moments are whole: cut to this rank's share.
    if cfg.optim.shard {
        actor_opt.shard(&ranks);
        critic_opt.iter_mut().for_each(|o| o.shard(&ranks));
    }
    let merged = merged_copy(&cfg, &actor)?;
    let metrics = match ranks.is_main() {
        true => Some(MetricsLog::open(&run_dir.join("metrics.jsonl"))?),
        false => None,
    };
    if let Some(m) = &metrics {
        m.header(&built)?;
    }
    let rewards = crate::rewards::load(&cfg, &runtime, run_dir)?;
    let run_dir = run_dir.to_path_buf();
    Ok(Parts {
        cfg,
        run_dir,
        plugin,
        actor,
        merged,
        critic,
        actor_opt,
        critic_opt,
        state,
        metrics,
        ranks,
        runtime,
        rewards,
        lock,
    })
}

/// Joins the ranks (one process without `rdzv`): `[distributed]`'s backend and timeout, one
/// GPU per local rank, and on the CPU the cores shared out among the machine's ranks.
fn join(cfg: &mut TrainConfig, rdzv: Option<&Rendezvous>) -> Result<Ranks> {
    let Some(r) = rdzv else {
        return Ok(Ranks::single());
    };
    let device = cfg.model.device.resolve()?;
    match device {
        // One GPU per local rank; where the launcher shows each rank only its own GPU
        // (Slurm's --gpus-per-task, a pod per GPU), that one.
        tch::Device::Cuda(_) => {
            let count = (tch::Cuda::device_count() as usize).max(1);
            cfg.rank_device = Some(vagen_model::DeviceChoice::Cuda(r.local_rank % count));
        }
        _ => {
            let local = std::env::var("LOCAL_WORLD_SIZE").ok().and_then(|v| v.parse::<usize>().ok()).unwrap_or(r.world);
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            tch::set_num_threads((cores / local.max(1)).max(1) as i32);
        }
    }
    let device = cfg.rank_device.unwrap_or(cfg.model.device).resolve()?;
    Ranks::join(r, &cfg.distributed, device).with_context(|| format!("joining the ranks as {r} ({})", r.source))
}

/// The run's sandbox and `env.plugin`, whose env configs it accepts (none for a harness).
struct OpenEnv {
    runtime: Runtime,
    plugin: Option<Arc<dyn Plugin>>,
}

fn open_env(cfg: &TrainConfig) -> Result<OpenEnv> {
    let runtime = Runtime::new(cfg.sandbox.clone())?;
    if cfg.env.harness.is_some() {
        return Ok(OpenEnv { runtime, plugin: None });
    }
    let plugin = runtime
        .load_named_in_with(
            &cfg.env.plugin,
            Path::new("the training config (env.plugin)"),
            cfg.allow_native,
            cfg.env.openenv.clone().unwrap_or_default(),
        )
        .with_context(|| format!("loading {}", cfg.env.plugin.display()))?;
    // Before any work: an env config the plugin refuses would otherwise surface as a
    // failed first rollout (or, for the held-out one, only at the first evaluation).
    // Without `train_config` the training config is `config` itself: offered once.
    let train = (!cfg.env.train_config.is_empty()).then(|| ("env.train_config", cfg.train_env_config_json()));
    for (field, json) in [Some(("env.config", cfg.env_config_json())), train].into_iter().flatten() {
        if let Err(e) = plugin.create(&json) {
            bail!("{field}: the plugin {} refuses it: {e}", cfg.env.plugin.display());
        }
    }
    // SFT imitates the oracle: without one it would train on empty answers.
    if cfg.sft.steps > 0 && !plugin.manifest().has_oracle {
        bail!(
            "sft.steps: SFT imitates the env's oracle, and the plugin {} ({}) has none; set sft.steps = 0",
            cfg.env.plugin.display(),
            plugin.manifest().name
        );
    }
    Ok(OpenEnv { runtime, plugin: Some(plugin) })
}

/// `name version sha256:…`: the env build, as the run's files record it.
fn env_build(plugin: &dyn vagen_runtime::Plugin) -> String {
    let m = plugin.manifest();
    format!("{} {} sha256:{}", m.name, m.version, plugin.info().sha256)
}
