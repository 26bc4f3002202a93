//! The networks a run trains and reads: the actor as `[model]` says (the embedded model's
//! tokenizer from the env, vision settings, LoRA adapters), a checkpoint's actor, the
//! critic, the optimisers, the KL reference and the generator thread's copy.

use crate::config::{CriticInit, TrainConfig};
use crate::generator::ModelFactory;
use crate::optimizer::AdamW;
use crate::vocabulary::EnvTexts;
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use vagen_dist::Ranks;
use vagen_model::{LoadOptions, LoraConfig, Model, ModelSource, ValueModel};
use vagen_runtime::Plugin;

/// `model.path` (or the embedded default or default-vl, drawn from `schedule.seed`, its
/// tokenizer retrained on `plugin`'s texts) on `model.device` in `model.dtype`, with the
/// run's vision settings.
pub fn load_model(cfg: &TrainConfig, plugin: Option<&dyn Plugin>) -> Result<Model> {
    load_model_with(cfg, embedded_texts(cfg, plugin)?.as_ref())
}

/// The env's texts when `model.path` is the embedded model, which learns its words.
pub(super) fn embedded_texts(cfg: &TrainConfig, plugin: Option<&dyn Plugin>) -> Result<Option<EnvTexts>> {
    cfg.model.path.is_embedded().then(|| crate::vocabulary::env_texts(cfg, plugin)).transpose()
}

pub(super) fn load_model_with(cfg: &TrainConfig, texts: Option<&EnvTexts>) -> Result<Model> {
    let options = load_options(cfg)?;
    let mut model = cfg
        .model
        .path
        .load(cfg.schedule.seed, options)
        .with_context(|| format!("loading the model {} (model.path)", cfg.model.path))?;
    if let Some(texts) = texts {
        crate::vocabulary::retokenize(&mut model, texts)?;
    }
    vision_settings(cfg, &mut model)?;
    Ok(model)
}

/// `model.freeze_vision` and `rollout.max_image_pixels` applied to a loaded model; either
/// set for a text-only model is refused (it would silently do nothing).
pub(super) fn vision_settings(cfg: &TrainConfig, model: &mut Model) -> Result<()> {
    let Some(vision) = model.vision.as_mut() else {
        if cfg.model.freeze_vision || cfg.rollout.sequences.max_image_pixels > 0 {
            bail!(
                "model.freeze_vision and rollout.max_image_pixels need a VL model; {} has no vision tower",
                cfg.model.path
            );
        }
        return Ok(());
    };
    if cfg.rollout.sequences.max_image_pixels > 0 {
        vision.processor.limit_pixels(cfg.rollout.sequences.max_image_pixels).context("rollout.max_image_pixels")?;
    }
    model.set_vision_trainable(!cfg.model.freeze_vision);
    Ok(())
}

/// `[model.lora]`'s adapters on a freshly loaded base (A drawn from `schedule.seed`); with
/// `sft.full` they wait for RL ([`adapters_over_sft`]).
pub(super) fn attach_lora(cfg: &TrainConfig, model: &mut Model) -> Result<()> {
    match &cfg.model.lora {
        Some(_) if cfg.sft.full => Ok(()),
        Some(lora) => attach(cfg, lora, model),
        None => Ok(()),
    }
}

fn attach(cfg: &TrainConfig, lora: &LoraConfig, model: &mut Model) -> Result<()> {
    model.attach_lora(lora, cfg.schedule.seed).context("model.lora")?;
    if model.vision.is_some() {
        model.set_vision_trainable(!cfg.model.freeze_vision);
    }
    Ok(())
}

/// With `engine.merge_lora`, the copy of `actor` with its adapters merged that rollouts
/// sample from; none before the adapters come (`sft.full`, as RL starts).
pub(crate) fn merged_copy(cfg: &TrainConfig, actor: &Model) -> Result<Option<Model>> {
    if !cfg.engine.merge_lora || actor.lora().is_none() {
        return Ok(None);
    }
    Ok(Some(actor.merged().context("merging the adapters for generation (engine.merge_lora)")?))
}

/// Where `sft.full` keeps the model SFT trained whole, the base of the adapters RL trains.
const SFT_BASE: &str = "base";

/// The base RL's adapters sit on: `model.path`, or with `sft.full` the run's `base/`.
fn rl_base(cfg: &TrainConfig, run_dir: &Path) -> ModelSource {
    match cfg.sft.full {
        true => ModelSource::Folder(run_dir.join(SFT_BASE)),
        false => cfg.model.path.clone(),
    }
}

/// `sft.full`, as RL starts: the fine-tuned `actor` written once as `run_dir/base/` (by
/// rank 0), named as the base of `[model.lora]`'s adapters, which are attached over it.
pub(crate) fn adapters_over_sft(cfg: &TrainConfig, run_dir: &Path, ranks: &Ranks, actor: &mut Model) -> Result<()> {
    let lora = cfg.model.lora.as_ref().context("sft.full without [model.lora]")?;
    let dir = write_once(ranks, run_dir, SFT_BASE, actor, "the fine-tuned base (sft.full)")?;
    actor.name_or_path = std::path::absolute(&dir)?.display().to_string();
    attach(cfg, lora, actor)
}

/// `model` saved as `run_dir/name/` unless a run before wrote it: aside, then renamed, so
/// a crash never leaves half of it; the other ranks wait for it (the run folder is shared,
/// as for resuming).
fn write_once(ranks: &Ranks, run_dir: &Path, name: &str, model: &Model, what: &str) -> Result<PathBuf> {
    let dir = run_dir.join(name);
    let absent = !dir.join("config.json").is_file() && !dir.join(vagen_model::ADAPTER_CONFIG).is_file();
    if ranks.is_main() && absent {
        let tmp = run_dir.join(format!("{name}.partial"));
        let _ = std::fs::remove_dir_all(&tmp);
        model.save(&tmp).with_context(|| format!("saving {what}"))?;
        std::fs::rename(&tmp, &dir).with_context(|| format!("moving {what} to {}", dir.display()))?;
    }
    ranks.barrier("waiting for rank 0 to write a model into the run folder (the KL reference, sft.full's base)")?;
    Ok(dir)
}

/// The async generator's own copy of the actor, made on its thread when it starts: loaded
/// as the actor was (on `engine.device` if set), adapters and all, the published weights
/// then copied over it.
pub(crate) fn generator_model(cfg: &TrainConfig, run_dir: &Path, plugin: Option<Arc<dyn Plugin>>) -> ModelFactory {
    let mut placed = cfg.clone();
    placed.rank_device = cfg.engine.device.or(cfg.rank_device);
    placed.model.path = rl_base(cfg, run_dir);
    Box::new(move || {
        let mut model = load_model(&placed, plugin.as_deref()).context("the generator's copy of the model")?;
        if let Some(lora) = &placed.model.lora {
            attach(&placed, lora, &mut model)?;
        }
        Ok(model)
    })
}

/// A checkpoint's actor: the whole model (with `sft.full`, also a LoRA run's SFT
/// checkpoints), or with LoRA the base (`model.path`, or `base/` with `sft.full`) and the
/// saved adapter, which must have the config's settings.
pub(super) fn load_actor(cfg: &TrainConfig, plugin: Option<&dyn Plugin>, run_dir: &Path, dir: &Path) -> Result<Model> {
    let options = load_options(cfg)?;
    let lora = match &cfg.model.lora {
        Some(_) if cfg.sft.full && !vagen_model::is_adapter_folder(dir) => None,
        lora => lora.as_ref(),
    };
    let Some(lora) = lora else {
        return Ok(Model::load(dir, options)?);
    };
    let base = rl_base(cfg, run_dir);
    let mut model = base
        .load_with_adapter(dir, cfg.schedule.seed, options)
        .with_context(|| format!("loading the model {base} (the base) with the adapter in {}", dir.display()))?;
    if base.is_embedded()
        && let Some(texts) = embedded_texts(cfg, plugin)?
    {
        // The base the adapter was trained on had the env's tokenizer (the same texts give
        // the same one).
        crate::vocabulary::retokenize(&mut model, &texts)?;
    }
    if model.lora() != Some(lora) {
        bail!(
            "its adapter was trained with other settings than [model.lora] ({:?}, not {lora:?}): a LoRA run resumes with the settings it began with",
            model.lora()
        );
    }
    Ok(model)
}

/// A critic as `critic.init` says, beside `actor` (none for critic-free estimators).
/// With `sft.full`, none before the actor has its adapters: the critic sits on their base.
pub(crate) fn new_critic(cfg: &TrainConfig, actor: &Model) -> Result<Option<ValueModel>> {
    let waits_for_adapters = cfg.model.lora.is_some() && actor.lora().is_none();
    if !cfg.algorithm.advantage.estimator.uses_critic() || waits_for_adapters {
        return Ok(None);
    }
    Ok(Some(match cfg.critic.init {
        CriticInit::Actor => ValueModel::from_policy(actor)?,
        CriticInit::Seed if actor.vision.is_some() => {
            bail!(
                "critic.init = \"seed\" draws a text-only critic; a VL actor's critic starts from the actor (critic.init = \"actor\")"
            )
        }
        CriticInit::Seed => {
            ValueModel::random(actor.config().clone(), cfg.schedule.seed.wrapping_add(1), load_options(cfg)?)?
        }
    }))
}

/// AdamW over `vars`, its moments sharded over the ranks with `optim.shard`.
pub(crate) fn new_optimizer(
    cfg: &TrainConfig,
    vars: std::collections::HashMap<String, tch::Tensor>,
    ranks: &Ranks,
) -> AdamW {
    match cfg.optim.shard {
        true => AdamW::new_sharded(vars, cfg.optim.weight_decay, ranks),
        false => AdamW::new(vars, cfg.optim.weight_decay),
    }
}

pub(super) fn load_options(cfg: &TrainConfig) -> Result<LoadOptions> {
    Ok(LoadOptions {
        device: cfg.rank_device.unwrap_or(cfg.model.device).resolve()?,
        dtype: cfg.model.dtype,
        lm_head_f32: cfg.model.lm_head_f32,
    })
}

/// The KL reference, first saving `actor` as it when the run has none yet (RL is
/// starting). A LoRA actor's reference is its adapter as RL began, frozen, over the same
/// base.
pub(crate) fn reference(cfg: &TrainConfig, run_dir: &Path, ranks: &Ranks, actor: &Model) -> Result<Model> {
    let dir = write_once(ranks, run_dir, "reference", actor, "the KL reference policy")?;
    let load = || -> Result<Model> {
        if cfg.model.lora.is_none() {
            return Ok(Model::load(&dir, load_options(cfg)?)?);
        }
        let mut reference = actor.sharing_base()?;
        reference.load_adapter(&dir)?;
        for t in reference.trainable().values() {
            let _ = t.set_requires_grad(false);
        }
        Ok(reference)
    };
    load().with_context(|| format!("loading the KL reference policy from {}", dir.display()))
}
