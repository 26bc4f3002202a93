//! The run loop: SFT warm start, then RL steps (collect → score → credit → update → log),
//! evaluating and saving on schedule. Each phase is a function of its own module; this
//! holds the run's state between them.

use crate::chat_data::ChatData;
use crate::checkpoint::{self, TrainerState};
use crate::collect::{Collected, Rollouts, collect};
use crate::config::{CriticInit, TrainConfig};
use crate::credit::assign_credit;
use crate::evaluate::insert_val;
use crate::generator::Generator;
use crate::log::{Timings, log, log_async};
use crate::metrics::{MetricsLog, StepMetrics};
use crate::optimizer::AdamW;
use crate::play::RunEnv;
use crate::progress::Progress;
use crate::run_lock::RunLock;
use crate::score::{Models, ScoreOptions, score};
use crate::setup;
use crate::update::{Optimizers, Shard, Updated, update};
use crate::warnings::{SkippedSteps, Warnings};
use anyhow::{Context, Result};
use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;
use vagen_dist::Ranks;
use vagen_model::{Model, ValueModel};
use vagen_runtime::{Plugin, Runtime};

mod open;

/// A training run: its config, folder, models, optimisers and counters, between the
/// phases that move them.
pub struct Trainer {
    pub cfg: TrainConfig,
    pub run_dir: PathBuf,
    /// `None` for a harness run.
    plugin: Option<Arc<dyn Plugin>>,
    pub actor: Rc<Model>,
    /// With `engine.merge_lora`: the actor with its adapters merged, which rollouts use;
    /// refreshed after every update.
    merged: Option<Rc<Model>>,
    critic: Option<ValueModel>,
    /// The frozen policy the KL penalty pulls towards: the actor as RL began (after SFT),
    /// kept in `run_dir/reference/` so a resumed run uses the same one. Only with a KL
    /// penalty configured.
    reference: Option<Model>,
    actor_opt: AdamW,
    critic_opt: Option<AdamW>,
    pub state: TrainerState,
    /// Rank 0's: the other ranks write no files.
    metrics: Option<MetricsLog>,
    /// This process among the data-parallel ranks (one, by default).
    ranks: Ranks,
    /// With `[async]`: the thread playing episodes ahead of the update (started with RL).
    pipeline: Option<Generator>,
    _runtime: Runtime,
    /// The `[[reward]]` functions, scoring every RL step's turns.
    rewards: RefCell<crate::rewards::Rewards>,
    /// Updates in a row whose every optimiser step was skipped: too many stop the run.
    skipped: SkippedSteps,
    /// What the run has warned of (once each).
    warnings: Warnings,
    /// The run folder is this trainer's alone while it lives (rank 0 holds it for all).
    _lock: Option<RunLock>,
}

impl Trainer {
    /// SFT (if configured and not done), then RL to `schedule.steps`, evaluating and saving
    /// on schedule. Returns held-out success after SFT and at the end.
    pub fn run(&mut self) -> Result<(f64, f64)> {
        if self.state.sft_steps_done < self.cfg.sft.steps {
            self.sft()?;
        } else if self.state.step == 0 {
            // Resumed at the end of SFT: the critic RL starts with is still the one SFT began
            // with (the copy happens after the last SFT checkpoint).
            self.critic_from_actor()?;
        }
        self.adapters_for_rl()?;
        if self.state.start_success.is_none() {
            let e = self.evaluated()?;
            self.state.start_success = Some(e.rollout.success);
            let mut m = StepMetrics::new(0);
            insert_val(&mut m, &e);
            self.write_metrics(&m)?;
            if self.ranks.is_main() {
                eprintln!("held-out success before RL: {:.3}", e.rollout.success);
            }
        }
        let (steps, main) = (self.cfg.schedule.steps, self.ranks.is_main());
        let mut bar = Progress::new(steps as u64, "RL steps", main, self.state.step as u64);
        while self.state.step < steps {
            let mut m = self.rl_step()?;
            self.state.step += 1;
            let s = self.state.step;
            let every = |k: usize| k > 0 && s.is_multiple_of(k);
            if every(self.cfg.schedule.eval_every) || s == steps {
                let e = self.evaluated()?;
                insert_val(&mut m, &e);
                self.state.last_success = Some(e.rollout.success);
            }
            m.step = s;
            self.write_metrics(&m)?;
            if main {
                self.warnings
                    .after_step(&m, self.cfg.rollout.sampling.max_new_tokens)
                    .iter()
                    .for_each(|l| bar.println(l));
            }
            let success = m.values.get("train/success").copied().unwrap_or(0.0);
            let val = self.state.last_success.map_or("-".into(), |v| format!("{v:.2}"));
            bar.set_message(format!("success {success:.2} val {val}"));
            bar.inc();
            if every(self.cfg.schedule.save_every) || s == steps {
                self.save()?;
            }
        }
        bar.finish();
        let start = self.state.start_success.unwrap_or(0.0);
        let end = match self.state.last_success {
            Some(v) => v,
            None => self.evaluate()?,
        };
        if main {
            crate::report::write(&self.run_dir)?;
        }
        Ok((start, end))
    }

    /// Supervised steps on (noisy) oracle trajectories through the rollout path, or on the
    /// conversations of `sft.data`; cross-entropy on the answer tokens only (`sft.rs`).
    pub fn sft(&mut self) -> Result<()> {
        let (steps, done) = (self.cfg.sft.steps, self.state.sft_steps_done);
        let vision = self.actor.vision.is_some();
        let chats = self.cfg.sft.data.as_deref().map(|path| ChatData::load(path, vision)).transpose()?;
        if let Some(data) = &chats {
            data.check(&self.cfg, &self.actor)?;
        }
        let mut bar = Progress::new(steps as u64, "SFT steps", self.ranks.is_main(), done as u64);
        let mut played = crate::sft::Played::new();
        while self.state.sft_steps_done < steps {
            // Field by field, not `run_env()`: the optimiser is borrowed mutably beside it.
            let run =
                RunEnv { cfg: &self.cfg, plugin: self.plugin.as_deref(), ranks: &self.ranks, run_dir: &self.run_dir };
            let done = self.state.sft_steps_done;
            let cached = played.len();
            let (loss, report) =
                crate::sft::step(&run, &self.actor, &mut self.actor_opt, done, chats.as_ref(), &mut played)?;
            let replayed = (self.cfg.sft.dataset_steps > 0).then_some(played.len() == cached);
            self.refresh_generator()?;
            self.skipped.count(report.applied, &format!("SFT step {}", self.state.sft_steps_done + 1), "sft.lr")?;
            self.state.sft_steps_done += 1;
            self.write_metrics(&crate::sft::metrics(loss, &report, self.state.sft_steps_done, replayed))?;
            bar.set_message(format!("loss {loss:.3}"));
            bar.inc();
            if crate::sft::save_due(&self.cfg.sft, self.state.sft_steps_done) {
                self.save()?;
            }
        }
        bar.finish();
        self.critic_from_actor()
    }

    /// One RL step in five phases: `collect` (rollouts → batch), `score` (old / reference
    /// log-probs, values), `assign_credit` (rewards → advantages), `update` (PPO epochs),
    /// `log`. Everything random in it derives from the step number, so a resumed run makes
    /// the same rollouts.
    pub fn rl_step(&mut self) -> Result<StepMetrics> {
        self.ensure_reference()?;
        if self.cfg.asynchronous.max_staleness > 0 && self.pipeline.is_none() {
            self.start_generator()?;
        }
        let (t0, vision0, step) = (Instant::now(), vagen_model::vision_forward_seconds(), self.state.step);
        let rollouts = match &self.pipeline {
            Some(g) => Rollouts::Ahead(g),
            None => Rollouts::Now(self.generator()),
        };
        let mut collected = collect(&self.run_env(), &self.actor, rollouts, &mut self.rewards.borrow_mut(), step)?;
        let t1 = Instant::now();
        score(&self.models(), &ScoreOptions::of(&self.cfg), &mut collected.batch)?;
        // Every rank's sequences, so that credit and metrics are the whole batch's.
        let local = std::mem::take(&mut collected.batch);
        let (batch, own) = crate::data_parallel::gather_batch(&self.ranks, local, collected.laid_out)?;
        collected.batch = batch;
        let t2 = Instant::now();
        assign_credit(&self.cfg, &mut collected.batch)?;
        let t3 = Instant::now();
        let updated = self.update(&collected, own)?;
        let t4 = Instant::now();
        if let Some(g) = &self.pipeline {
            g.publish(step + 1, crate::generator::snapshot(&self.actor.trainable()));
        }
        let publish = t4.elapsed().as_secs_f64();
        let secs = |a: Instant, b: Instant| (b - a).as_secs_f64();
        let (rollout, score) = (secs(t0, t1), secs(t1, t2));
        let (update, step_s) = (t3.elapsed().as_secs_f64(), t0.elapsed().as_secs_f64());
        let t =
            Timings { rollout, score, update, step: step_s, vision: vagen_model::vision_forward_seconds() - vision0 };
        let mut m = log(step + 1, &collected, &updated, t, !self.cfg.reuses_logprobs());
        if self.pipeline.is_some() {
            log_async(&mut m, &collected, self.cfg.asynchronous.max_staleness, step, t, publish);
        }
        Ok(m)
    }

    /// Starts the `[async]` generator at the current step and weights.
    fn start_generator(&mut self) -> Result<()> {
        let weights = crate::generator::snapshot(&self.actor.trainable());
        let model = setup::generator_model(&self.cfg, &self.run_dir, self.plugin.clone());
        let (plugin, share, step) = (self.plugin.clone(), self.run_env().share(), self.state.step);
        self.pipeline = Some(Generator::start(&self.cfg, plugin, share, step, weights, model)?);
        crate::generator::own_threads(self.cfg.asynchronous.trainer_threads);
        Ok(())
    }

    /// The update, stopping the run after too many steps in a row with no applied update.
    fn update(&mut self, collected: &Collected, own: std::ops::Range<usize>) -> Result<Updated> {
        let models = Models { actor: &self.actor, reference: self.reference.as_ref(), critic: self.critic.as_ref() };
        let opt = Optimizers { actor: &mut self.actor_opt, critic: self.critic_opt.as_mut() };
        let shard = Shard { ranks: &self.ranks, own };
        let updated = update(&self.cfg, &models, opt, &collected.batch, self.state.step as u64, &shard)?;
        self.refresh_generator()?;
        // A step with nothing to train on (every sequence filtered out) has not diverged.
        let fine = updated.applied || !updated.attempted;
        self.skipped.count(fine, &format!("RL step {}", self.state.step + 1), "optim.actor_lr")?;
        Ok(updated)
    }

    /// RL starts from the fine-tuned actor, so an `actor` critic is a copy of that one; it
    /// learned nothing during SFT. Once RL has updated it (step > 0), it is never replaced.
    fn critic_from_actor(&mut self) -> Result<()> {
        if self.critic.is_some() && self.cfg.critic.init == CriticInit::Actor && self.state.step == 0 {
            self.fresh_critic()?;
        }
        Ok(())
    }

    /// A new critic beside the actor as it is now, with a new optimiser.
    fn fresh_critic(&mut self) -> Result<()> {
        self.critic = setup::new_critic(&self.cfg, &self.actor)?;
        self.critic_opt = self.critic.as_ref().map(|c| setup::new_optimizer(&self.cfg, c.trainable(), &self.ranks));
        Ok(())
    }

    /// `sft.full`: the model SFT trained whole becomes the frozen base of `[model.lora]`'s
    /// adapters, which get an optimiser of their own (the full one's moments are dropped),
    /// a critic over the same base and, with `engine.merge_lora`, the merged copy.
    fn adapters_for_rl(&mut self) -> Result<()> {
        if self.cfg.model.lora.is_none() || self.actor.lora().is_some() {
            return Ok(());
        }
        let actor = Rc::get_mut(&mut self.actor).context("the actor is shared as its adapters are attached")?;
        setup::adapters_over_sft(&self.cfg, &self.run_dir, &self.ranks, actor)?;
        self.actor_opt = setup::new_optimizer(&self.cfg, self.actor.trainable(), &self.ranks);
        self.fresh_critic()?;
        self.merged = setup::merged_copy(&self.cfg, &self.actor)?.map(Rc::new);
        Ok(())
    }

    /// Loads the KL reference (`setup::reference`) when RL needs one and has none yet.
    fn ensure_reference(&mut self) -> Result<()> {
        if self.cfg.algorithm.policy_loss.kl.is_some() && self.reference.is_none() {
            self.reference = Some(setup::reference(&self.cfg, &self.run_dir, &self.ranks, &self.actor)?);
        }
        Ok(())
    }

    /// Held-out success over `env.val_episodes` seeds at the evaluation temperature.
    pub fn evaluate(&self) -> Result<f64> {
        Ok(self.evaluate_all()?.success)
    }

    /// The held-out episodes' figures; their sample transcripts go to the run folder. A
    /// failed episode counts as a failure, and too many stop the run as in training.
    pub fn evaluate_all(&self) -> Result<vagen_rollout::RolloutMetrics> {
        Ok(self.evaluated()?.rollout)
    }

    fn evaluated(&self) -> Result<crate::evaluate::Evaluated> {
        crate::evaluate::evaluate(&self.run_env(), self.generator(), self.metrics.as_ref(), self.state.step)
    }

    /// Writes a checkpoint of the current state now.
    pub fn save_now(&self) -> Result<()> {
        self.save()
    }

    fn save(&self) -> Result<()> {
        let critic = self.critic.as_ref().zip(self.critic_opt.as_ref());
        let (state, keep_last) = (&self.state, self.cfg.schedule.keep_last);
        checkpoint::save_ranked(&self.ranks, &self.run_dir, state, &self.actor, critic, &self.actor_opt, keep_last)
    }

    /// One line of `metrics.jsonl` (rank 0 only).
    fn write_metrics(&self, m: &StepMetrics) -> Result<()> {
        match &self.metrics {
            Some(log) => log.write(m),
            None => Ok(()),
        }
    }

    fn run_env(&self) -> RunEnv<'_> {
        RunEnv { cfg: &self.cfg, plugin: self.plugin.as_deref(), ranks: &self.ranks, run_dir: &self.run_dir }
    }

    fn models(&self) -> Models<'_> {
        Models { actor: &self.actor, reference: self.reference.as_ref(), critic: self.critic.as_ref() }
    }

    /// This process among the data-parallel ranks.
    pub fn ranks(&self) -> &Ranks {
        &self.ranks
    }

    /// The critic, with a critic-based estimator.
    pub fn critic(&self) -> Option<&ValueModel> {
        self.critic.as_ref()
    }

    /// The model rollouts sample from: the actor, or its merged copy.
    pub fn generator(&self) -> Rc<Model> {
        self.merged.clone().unwrap_or_else(|| self.actor.clone())
    }

    /// After an update: the merged copy (if any) takes the new adapters.
    fn refresh_generator(&self) -> Result<()> {
        if let Some(merged) = &self.merged {
            self.actor.refresh_merged(merged).context("refreshing the merged copy (engine.merge_lora)")?;
        }
        Ok(())
    }
}
