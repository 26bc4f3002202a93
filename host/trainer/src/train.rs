//! The training loop: SFT warm start, then rollout → scores → advantages → filtering → PPO
//! epochs, with evaluation, checkpoints, metrics and resumption.

use crate::checkpoint::{self, TrainerState};
use crate::collect::Collected;
use crate::config::{CriticInit, TrainConfig};
use crate::credit::assign_credit;
use crate::log::{Timings, log};
use crate::metrics::{MetricsLog, StepMetrics};
use crate::micro::{Micro, logprobs_and_entropy};
use crate::optimizer::AdamW;
use crate::progress::Progress;
use crate::run_lock::{RunLock, check_new_run_folder};
use crate::score::{Models, ScoreOptions, score};
use crate::step_batch::split;
use crate::update::{Optimizers, Shard, Updated, update};
use anyhow::{Context, Result, bail};
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;
use tch::Kind;
use vagen_dist::{Ranks, Rendezvous};
use vagen_model::{GenerateOptions, LoadOptions, Model, SamplingFor, ValueModel};
use vagen_policy::ModelPolicy;
use vagen_rollout::{Episodes, FailurePolicy, Outcome, Policy, RolloutConfig, TooManyFailures, Trajectory};
use vagen_runtime::{Plugin, Runtime};

pub struct Trainer {
    pub cfg: TrainConfig,
    pub run_dir: PathBuf,
    pub(crate) plugin: Arc<dyn Plugin>,
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
    pipeline: Option<crate::generator::Generator>,
    _runtime: Runtime,
    /// The `[[reward]]` functions, scoring every RL step's turns.
    pub(crate) rewards: RefCell<crate::rewards::Rewards>,
    /// Updates in a row (SFT or RL steps) whose every optimiser step was skipped for a
    /// non-finite gradient norm.
    skipped_in_a_row: usize,
    /// What the run has warned of (once each).
    warnings: crate::warnings::Warnings,
    /// The run folder is this trainer's alone while it lives (rank 0 holds it for all).
    _lock: Option<RunLock>,
}

/// Steps in a row with no applied update before the run stops: a diverged loss does not
/// come back by itself, and going on would only burn time on an unchanged model.
const MAX_SKIPPED_IN_A_ROW: usize = 3;

impl Trainer {
    /// A new run in `run_dir` (created; must not hold a run already).
    pub fn new(cfg: TrainConfig, run_dir: &Path) -> Result<Self> {
        Self::new_ranked(cfg, run_dir, None)
    }

    /// [`Trainer::new`] as one of the ranks `rdzv` describes (none: one process): rank 0
    /// makes and writes the run folder.
    pub fn new_ranked(mut cfg: TrainConfig, run_dir: &Path, rdzv: Option<&Rendezvous>) -> Result<Self> {
        let ranks = join(&mut cfg, rdzv)?;
        let created = ranks.is_main() && !run_dir.exists();
        let built = Self::build(cfg, run_dir, ranks);
        if built.is_err() && created {
            // Refused (a model that does not load, an env config the plugin rejects): no
            // empty run folder is left behind.
            let _ = std::fs::remove_dir_all(run_dir);
        }
        built
    }

    fn build(cfg: TrainConfig, run_dir: &Path, ranks: Ranks) -> Result<Self> {
        let lock = match ranks.is_main() {
            true => {
                if run_dir.join("config.toml").exists() {
                    bail!(
                        "{} already holds a run: resume it with --resume, or choose another --run-dir",
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
        let env = open_env(&cfg)?;
        let texts = embedded_texts(&cfg, env.plugin.as_ref())?;
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
        let t = Self::assemble(cfg, run_dir, lock, env, actor, critic, TrainerState::default(), None, ranks)?;
        // Written once everything it names has loaded and been accepted, so a folder with a
        // config.toml always holds a run that can be resumed (or restarted elsewhere).
        if t.ranks.is_main() {
            std::fs::write(run_dir.join("config.toml"), t.cfg.to_toml())?;
        }
        Ok(t)
    }

    /// Continues the run in `run_dir` from its last complete checkpoint. A native plugin
    /// is refused, and a judge reaches only loopback: the run folder's config may come from
    /// someone else.
    pub fn resume(run_dir: &Path, overrides: &[String]) -> Result<Self> {
        Self::resume_with(run_dir, overrides, false, crate::JudgeAccess::default())
    }

    /// [`Trainer::resume`] with what only the user's command line grants: a native
    /// `env.plugin` (`--allow-native`) and the judge's hosts and key.
    pub fn resume_with(
        run_dir: &Path,
        overrides: &[String],
        allow_native: bool,
        judge_access: crate::JudgeAccess,
    ) -> Result<Self> {
        Self::resume_ranked(run_dir, overrides, allow_native, judge_access, None)
    }

    /// [`Trainer::resume_with`] as one of `ranks` (every rank reads the same checkpoint,
    /// whatever world size wrote it: checkpoints are whole).
    pub fn resume_ranked(
        run_dir: &Path,
        overrides: &[String],
        allow_native: bool,
        judge_access: crate::JudgeAccess,
        rdzv: Option<&Rendezvous>,
    ) -> Result<Self> {
        let path = run_dir.join("config.toml");
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let mut cfg = TrainConfig::parse(&text, &path.display().to_string(), overrides)?;
        cfg.allow_native = allow_native;
        cfg.judge_access = judge_access;
        let ranks = join(&mut cfg, rdzv)?;
        let mut lock = Some(if ranks.is_main() { Some(RunLock::acquire(run_dir)?) } else { None });
        let mut ranks = Some(ranks);
        // The newest checkpoint that loads whole; a corrupt one (a truncated file, a disk
        // error) is skipped with a warning, never half used.
        let mut refused = Vec::new();
        let mut env = Some(open_env(&cfg)?);
        for ckpt in checkpoint::complete(run_dir)? {
            // A panic in libtorch is a checkpoint that will not load, like a torn file.
            let plugin = env.as_ref().expect("taken only when returning").plugin.as_ref();
            let loaded =
                vagen_model::catch_panic(|| Ok(load_checkpoint(&cfg, plugin, &ckpt))).map_err(anyhow::Error::from);
            let loaded = match loaded.and_then(|r| r) {
                Ok(loaded) => loaded,
                Err(e) => {
                    let e = vagen_model::without_cpp_backtrace(&format!("{e:#}")).to_string();
                    // Moved aside (kept for a look), so later saves and resumes pass it by.
                    let name = ckpt.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                    let aside = ckpt.with_file_name(format!(".{name}.corrupt"));
                    let main = ranks.as_ref().is_some_and(Ranks::is_main);
                    let moved = main && std::fs::rename(&ckpt, &aside).is_ok();
                    let to = if moved { format!(", moved to {}", aside.display()) } else { String::new() };
                    eprintln!("warning: {} will not load ({e}){to}; trying the one before", ckpt.display());
                    refused.push(format!("{}: {e}", ckpt.display()));
                    continue;
                }
            };
            let (actor, critic, state, optims) = loaded;
            let lock = lock.take().expect("taken once: this branch returns");
            let ranks = ranks.take().expect("taken once: this branch returns");
            let env = env.take().expect("taken once: this branch returns");
            let t = Self::assemble(cfg, run_dir, lock, env, actor, critic, state, Some(optims), ranks)?;
            crate::data_parallel::same_state(&t.ranks, &t.state, &ckpt)?;
            // Appended, not rewritten: lines past the checkpoint stay, and readers take the
            // ones after this mark (`metrics::read`).
            if let Some(m) = &t.metrics {
                m.mark_resumed(&t.state)?;
            }
            if t.ranks.is_main() {
                eprintln!(
                    "resuming {} at step {} ({} SFT steps done; checkpoint {})",
                    run_dir.display(),
                    t.state.step,
                    t.state.sft_steps_done,
                    ckpt.display()
                );
            }
            return Ok(t);
        }
        if refused.is_empty() {
            bail!("{} has no complete checkpoint to resume from", run_dir.display());
        }
        bail!("no checkpoint of {} loads: {}", run_dir.display(), refused.join("; "))
    }

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
    ) -> Result<Self> {
        crate::data_parallel::same_config(&ranks, &cfg.to_toml())?;
        tch::manual_seed(cfg.schedule.seed as i64);
        let OpenEnv { runtime, plugin } = env;
        let (mut actor_opt, mut critic_opt) = optims.unwrap_or_else(|| {
            let actor_opt = new_optimizer(&cfg, actor.trainable(), &ranks);
            (actor_opt, critic.as_ref().map(|c| new_optimizer(&cfg, c.trainable(), &ranks)))
        });
        // A checkpoint's moments are whole: cut to this rank's share.
        if cfg.optim.shard {
            actor_opt.shard(&ranks);
            critic_opt.iter_mut().for_each(|o| o.shard(&ranks));
        }
        let merged = match cfg.engine.merge_lora {
            true => Some(Rc::new(actor.merged().context("merging the adapters for generation (engine.merge_lora)")?)),
            false => None,
        };
        let metrics = match ranks.is_main() {
            true => Some(MetricsLog::open(&run_dir.join("metrics.jsonl"))?),
            false => None,
        };
        let rewards = crate::rewards::load(&cfg, &runtime, run_dir)?;
        Ok(Trainer {
            cfg,
            run_dir: run_dir.to_path_buf(),
            plugin,
            actor: Rc::new(actor),
            merged,
            critic,
            reference: None,
            actor_opt,
            critic_opt,
            state,
            metrics,
            ranks,
            pipeline: None,
            _runtime: runtime,
            rewards: RefCell::new(rewards),
            skipped_in_a_row: 0,
            warnings: Default::default(),
            _lock: lock,
        })
    }

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
        if self.state.start_success.is_none() {
            let v = self.evaluate_all()?;
            self.state.start_success = Some(v.success);
            let mut m = StepMetrics::new(0);
            insert_val(&mut m, &v);
            self.write_metrics(&m)?;
            if self.ranks.is_main() {
                eprintln!("held-out success before RL: {:.3}", v.success);
            }
        }
        let mut bar =
            Progress::new(self.cfg.schedule.steps as u64, "RL steps", self.ranks.is_main(), self.state.step as u64);
        while self.state.step < self.cfg.schedule.steps {
            let mut m = self.rl_step()?;
            self.state.step += 1;
            let s = self.state.step;
            let every = |k: usize| k > 0 && s.is_multiple_of(k);
            if every(self.cfg.schedule.eval_every) || s == self.cfg.schedule.steps {
                let v = self.evaluate_all()?;
                insert_val(&mut m, &v);
                self.state.last_success = Some(v.success);
            }
            m.step = s;
            self.write_metrics(&m)?;
            if self.ranks.is_main() {
                for line in self.warnings.after_step(&m, self.cfg.rollout.sampling.max_new_tokens) {
                    bar.println(&line);
                }
            }
            bar.set_message(format!(
                "success {:.2} val {}",
                m.values.get("train/success").copied().unwrap_or(0.0),
                self.state.last_success.map_or("-".into(), |v| format!("{v:.2}"))
            ));
            bar.inc();
            if every(self.cfg.schedule.save_every) || s == self.cfg.schedule.steps {
                self.save()?;
            }
        }
        bar.finish();
        let start = self.state.start_success.unwrap_or(0.0);
        let end = match self.state.last_success {
            Some(v) => v,
            None => self.evaluate()?,
        };
        if self.ranks.is_main() {
            crate::report::write(&self.run_dir)?;
        }
        Ok((start, end))
    }

    /// This process among the data-parallel ranks.
    pub fn ranks(&self) -> &Ranks {
        &self.ranks
    }

    /// One line of `metrics.jsonl` (rank 0 only).
    fn write_metrics(&self, m: &StepMetrics) -> Result<()> {
        match &self.metrics {
            Some(log) => log.write(m),
            None => Ok(()),
        }
    }

    /// The critic, with a critic-based estimator.
    pub fn critic(&self) -> Option<&ValueModel> {
        self.critic.as_ref()
    }

    /// Writes a checkpoint of the current state now.
    pub fn save_now(&self) -> Result<()> {
        self.save()
    }

    fn save(&self) -> Result<()> {
        // Sharded moments are put back together first (every rank takes part).
        let actor_opt = self.actor_opt.unsharded(&self.ranks)?;
        let critic_opt = self.critic_opt.as_ref().map(|o| o.unsharded(&self.ranks)).transpose()?.flatten();
        if !self.ranks.is_main() {
            return Ok(());
        }
        checkpoint::save(
            &self.run_dir,
            &self.state,
            &self.actor,
            self.critic.as_ref().zip(critic_opt.as_ref().or(self.critic_opt.as_ref())),
            actor_opt.as_ref().unwrap_or(&self.actor_opt),
            self.cfg.schedule.keep_last,
        )
    }

    /// Supervised steps on (noisy) oracle trajectories through the rollout path; cross-
    /// entropy on the oracle's answer tokens only.
    pub fn sft(&mut self) -> Result<()> {
        let visible = self.ranks.is_main();
        let mut bar = Progress::new(self.cfg.sft.steps as u64, "SFT steps", visible, self.state.sft_steps_done as u64);
        while self.state.sft_steps_done < self.cfg.sft.steps {
            // With a fixed dataset, every step replays the same episodes.
            let k = match self.cfg.sft.dataset_steps {
                0 => self.state.sft_steps_done as u64,
                n => (self.state.sft_steps_done % n) as u64,
            };
            // This rank's share of the step's episodes; the mean is over every rank's tokens.
            let batch = self.collect_sft(k)?;
            // Mean cross-entropy over the step's answer tokens, accumulated as sums.
            let mut total = 0.0;
            let mut tokens = [batch.tokens.loss_mask.iter().filter(|&&m| m).count() as f64];
            self.ranks.sum(&mut tokens)?;
            let all_tokens = (tokens[0] as usize).max(1);
            let seqs: Vec<usize> = (0..batch.len()).collect();
            for chunk in split(&batch, &seqs, self.cfg.optim.micro_batch, self.cfg.optim.micro_batch_tokens) {
                let micro = Micro::new(&batch, &chunk, self.actor.vision.as_ref(), self.actor.device())?;
                let (logp, _) = logprobs_and_entropy(&self.actor, &micro, 1.0)?;
                let nll = -(logp * &micro.loss_mask).sum(Kind::Float);
                total += nll.double_value(&[]);
                (nll / all_tokens as f64).backward();
            }
            let mut sums = [total];
            self.ranks.sum(&mut sums)?;
            total = sums[0];
            let report = self.actor_opt.step_across(&self.ranks, self.cfg.sft.lr, self.cfg.optim.grad_clip)?;
            self.refresh_generator()?;
            self.count_skipped(report.applied, &format!("SFT step {}", self.state.sft_steps_done + 1), "sft.lr")?;
            self.state.sft_steps_done += 1;
            let mut m = StepMetrics::new(0);
            m.values.insert("sft/loss".into(), total / all_tokens as f64);
            m.values.insert("sft/grad_norm".into(), report.grad_norm);
            m.values.insert("sft/step".into(), self.state.sft_steps_done as f64);
            self.write_metrics(&m)?;
            bar.set_message(format!("loss {:.3}", total / all_tokens as f64));
            bar.inc();
            let (n, every) = (self.state.sft_steps_done, self.cfg.sft.save_every);
            if n == self.cfg.sft.steps || (every > 0 && n.is_multiple_of(every)) {
                self.save()?;
            }
        }
        bar.finish();
        self.critic_from_actor()
    }

    /// RL starts from the fine-tuned actor, so an `actor` critic is a copy of that one; it
    /// learned nothing during SFT. Once RL has updated it (step > 0), it is never replaced.
    fn critic_from_actor(&mut self) -> Result<()> {
        if self.critic.is_some() && self.cfg.critic.init == CriticInit::Actor && self.state.step == 0 {
            self.critic = new_critic(&self.cfg, &self.actor)?;
            self.critic_opt = self.critic.as_ref().map(|c| new_optimizer(&self.cfg, c.trainable(), &self.ranks));
        }
        Ok(())
    }

    /// Groups of `group_size` episodes from `seeds` on the training env config, answered
    /// by `policy`; more failures than `env.max_failure_rate` stop the run (`what` and
    /// `file` name the step in the error and the reproducer).
    pub(crate) fn episodes(
        &self,
        seeds: &[u64],
        group_size: usize,
        policy: &mut dyn Policy,
        what: &str,
        file: &str,
    ) -> Result<Vec<Trajectory>> {
        let share = (self.ranks.rank(), self.ranks.world());
        let outcome = play_groups(&self.cfg, self.plugin.as_ref(), seeds, group_size, policy, share)?;
        self.check_failures(outcome.verdict, what, file, &self.cfg.train_env_config_json())?;
        Ok(outcome.trajectories)
    }

    /// Held-out success over `env.val_episodes` seeds at the evaluation temperature.
    pub fn evaluate(&self) -> Result<f64> {
        Ok(self.evaluate_all()?.success)
    }

    /// The held-out episodes' figures; their sample transcripts go to the run folder. A
    /// failed episode counts as a failure, and too many stop the run as in training.
    pub fn evaluate_all(&self) -> Result<vagen_rollout::RolloutMetrics> {
        let outcome = held_out_share(&self.cfg, self.plugin.as_ref(), self.generator(), &self.ranks, false)?;
        if let Some(metrics) = &self.metrics {
            crate::report::save_samples(&self.run_dir, self.state.step, &outcome.trajectories)?;
            // The first held-out episode's opening picture, when the env shows one.
            let first = outcome.trajectories.first().and_then(|t| t.turns.first());
            if let Some(image) = first.and_then(|t| t.images.first()) {
                metrics.frame(self.state.step, "eval/first-frame", image)?;
            }
        }
        let (what, file) = (format!("the evaluation at step {}", self.state.step), format!("eval{}", self.state.step));
        self.check_failures(outcome.verdict, &what, &file, &self.cfg.env_config_json())?;
        crate::data_parallel::rollout_metrics(&self.ranks, vagen_rollout::RolloutTotals::of(&outcome.trajectories))
    }

    /// Counts a step whose actor updates were all skipped (non-finite gradient norm); stops
    /// the run at [`MAX_SKIPPED_IN_A_ROW`] of them, naming the learning rate to look at.
    fn count_skipped(&mut self, applied: bool, step: &str, lr: &str) -> Result<()> {
        self.skipped_in_a_row = if applied { 0 } else { self.skipped_in_a_row + 1 };
        if self.skipped_in_a_row >= MAX_SKIPPED_IN_A_ROW {
            bail!(
                "{step}: the actor's gradient norm was not finite in every update of the last {} steps, so none was applied (actor/skipped_steps): the loss has diverged; resume from the last checkpoint with a lower {lr} or tighter optim.grad_clip",
                self.skipped_in_a_row
            );
        }
        Ok(())
    }

    /// Stops the run when more than `env.max_failure_rate` of `trajs` failed (the
    /// failure policy `vagen-host run` applies too), naming the plugin and the first error,
    /// with a reproducer of it in the run folder (`failure-{file}-seed{seed}.json`).
    pub(crate) fn check_failures(
        &self,
        verdict: Result<(), TooManyFailures>,
        what: &str,
        file: &str,
        env_config: &str,
    ) -> Result<()> {
        let Err(e) = verdict else {
            return Ok(());
        };
        let path = self.run_dir.join(format!("failure-{file}-seed{}.json", e.seed));
        let reproducer = e.reproducer(self.plugin.as_ref(), env_config);
        std::fs::write(&path, serde_json::to_string_pretty(&reproducer)?)?;
        bail!(
            "{} of {} trajectories failed in {what} (more than env.max_failure_rate {}: {}); the env plugin {} faulted: {}; reproducer: {} (replay with `vagen-host run --replay {}`)",
            e.failed,
            e.total,
            e.max_rate,
            vagen_rollout::counts_text(&e.counts),
            self.cfg.env.plugin.display(),
            e.failure,
            path.display(),
            path.display()
        )
    }

    /// The RL step's episodes: from the generator thread with `[async]`, else played now.
    pub(crate) fn played(&self) -> Result<crate::collect::Played> {
        let step = self.state.step;
        match &self.pipeline {
            Some(g) => g.take(step),
            None => {
                let share = (self.ranks.rank(), self.ranks.world());
                crate::collect::play(&self.cfg, self.plugin.as_ref(), self.generator(), step, step, share, None)
            }
        }
    }

    /// The model rollouts sample from: the actor, or its merged copy.
    pub fn generator(&self) -> Rc<Model> {
        self.merged.clone().unwrap_or_else(|| self.actor.clone())
    }

    /// After an update: the merged copy (if any) takes the new adapters.
    pub(crate) fn refresh_generator(&self) -> Result<()> {
        if let Some(merged) = &self.merged {
            self.actor.refresh_merged(merged).context("refreshing the merged copy (engine.merge_lora)")?;
        }
        Ok(())
    }

    /// Loads the KL reference, first saving the current actor as it when the run has none
    /// yet (RL is starting). No-op without a KL penalty. A LoRA actor's reference is its
    /// adapter as RL began, frozen, over the same base.
    fn ensure_reference(&mut self) -> Result<()> {
        if self.cfg.algorithm.policy_loss.kl.is_none() || self.reference.is_some() {
            return Ok(());
        }
        let dir = self.run_dir.join("reference");
        let absent = !dir.join("config.json").is_file() && !dir.join(vagen_model::ADAPTER_CONFIG).is_file();
        if self.ranks.is_main() && absent {
            // Written aside and renamed, so a crash never leaves half a reference behind.
            let tmp = self.run_dir.join("reference.partial");
            let _ = std::fs::remove_dir_all(&tmp);
            self.actor.save(&tmp).context("saving the KL reference policy")?;
            std::fs::rename(&tmp, &dir).with_context(|| format!("moving the KL reference to {}", dir.display()))?;
        }
        // The other ranks read what rank 0 wrote (the run folder is shared, as for resuming).
        self.ranks.barrier("waiting for rank 0 to write the KL reference")?;
        let load = || -> Result<Model> {
            if self.cfg.model.lora.is_none() {
                return Ok(Model::load(&dir, load_options(&self.cfg)?)?);
            }
            let mut reference = self.actor.sharing_base()?;
            reference.load_adapter(&dir)?;
            for t in reference.trainable().values() {
                let _ = t.set_requires_grad(false);
            }
            Ok(reference)
        };
        let reference = load().with_context(|| format!("loading the KL reference policy from {}", dir.display()))?;
        self.reference = Some(reference);
        Ok(())
    }

    /// One RL step in five phases: `collect` (rollouts → batch), `score` (old / reference
    /// log-probs, values), `assign_credit` (rewards → advantages), `update` (PPO epochs),
    /// `log`. Everything random in it derives from the step number, so a resumed run makes
    /// the same rollouts.
    pub fn rl_step(&mut self) -> Result<StepMetrics> {
        self.ensure_reference()?;
        if self.cfg.asynchronous.max_staleness > 0 && self.pipeline.is_none() {
            let weights = crate::generator::snapshot(&self.actor.trainable());
            let share = (self.ranks.rank(), self.ranks.world());
            let g =
                crate::generator::Generator::start(&self.cfg, self.plugin.clone(), share, self.state.step, weights)?;
            self.pipeline = Some(g);
            crate::generator::own_threads(self.cfg.asynchronous.trainer_threads);
        }
        let t0 = Instant::now();
        let vision0 = vagen_model::vision_forward_seconds();
        let mut collected = self.collect()?;
        let t1 = Instant::now();
        self.score(&mut collected)?;
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
            g.publish(self.state.step + 1, crate::generator::snapshot(&self.actor.trainable()));
        }
        let publish = t4.elapsed().as_secs_f64();
        let secs = |a: Instant, b: Instant| (b - a).as_secs_f64();
        let (rollout, score) = (secs(t0, t1), secs(t1, t2));
        let timings = Timings {
            rollout,
            score,
            update: t3.elapsed().as_secs_f64(),
            step: t0.elapsed().as_secs_f64(),
            vision: vagen_model::vision_forward_seconds() - vision0,
        };
        let mut m = log(self.state.step + 1, &collected, &updated, timings, !self.cfg.rollout.sequences.reuse_logprobs);
        if self.pipeline.is_some() {
            // The episodes' own time is the generator's (`timing_s/rollout` holds the
            // trainer's wait for them and their scoring and layout).
            let (pace, dropped) = (collected.pace, collected.dropped);
            let (mean, max) = collected.versions.staleness(self.state.step);
            let busy = pace.play_s + pace.generator_wait_s;
            for (name, value) in [
                ("async/max_staleness", self.cfg.asynchronous.max_staleness as f64),
                ("async/staleness", mean),
                ("async/staleness_max", max as f64),
                ("async/dropped_batches", dropped.batches as f64),
                ("async/dropped_tokens", dropped.tokens as f64),
                ("async/generator_idle", if busy > 0.0 { pace.generator_wait_s / busy } else { 0.0 }),
                ("async/trainer_idle", pace.trainer_wait_s / timings.step.max(1e-9)),
                ("timing_s/generate", pace.play_s),
                ("timing_s/generator_wait", pace.generator_wait_s),
                ("timing_s/wait_batch", pace.trainer_wait_s),
                ("timing_s/weight_sync", publish),
            ] {
                m.values.insert(name.into(), value);
            }
        }
        Ok(m)
    }

    fn models(&self) -> Models<'_> {
        Models { actor: &self.actor, reference: self.reference.as_ref(), critic: self.critic.as_ref() }
    }

    fn score(&self, collected: &mut Collected) -> Result<()> {
        let o = ScoreOptions {
            reuse_logprobs: self.cfg.rollout.sequences.reuse_logprobs,
            temperature: self.cfg.rollout.sampling.temperature.max(1e-6),
            micro_batch: self.cfg.optim.micro_batch,
            micro_batch_tokens: self.cfg.optim.micro_batch_tokens,
        };
        score(&self.models(), &o, &mut collected.batch)
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
        self.count_skipped(fine, &format!("RL step {}", self.state.step + 1), "optim.actor_lr")?;
        Ok(updated)
    }
}

/// `val/success` and the figures that explain it, as `vagen-host eval` prints them.
fn insert_val(m: &mut StepMetrics, v: &vagen_rollout::RolloutMetrics) {
    m.values.insert("val/success".into(), v.success);
    m.values.insert("val/turns".into(), v.mean_turns);
    m.values.insert("val/format_correct_rate".into(), v.format_correct_rate);
}

/// One episode per held-out seed (`env.val_episodes` from `env.val_seed_start`) at
/// `rollout.val_temperature`, with the rollout settings training uses: what
/// `Trainer::evaluate` and `vagen-host eval --config` measure. Shows its progress, a turn
/// at a time (`progress.rs`).
pub fn held_out_rollouts(cfg: &TrainConfig, plugin: &dyn Plugin, model: Rc<Model>) -> Result<Outcome> {
    held_out_share(cfg, plugin, model, &Ranks::single(), true)
}

/// Groups of `group_size` episodes from rank `rank` of `world`'s block of `seeds`, on the
/// training env config, numbered as one process numbers them.
pub(crate) fn play_groups(
    cfg: &TrainConfig,
    plugin: &dyn Plugin,
    seeds: &[u64],
    group_size: usize,
    policy: &mut dyn Policy,
    (rank, world): (usize, usize),
) -> Result<Outcome> {
    let env_config = cfg.train_env_config_json();
    let config = cfg.rollout.rollout_config();
    run_share(episodes(cfg, plugin, &env_config, &config, group_size), seeds, policy, (rank, world))
}

/// `episodes` over rank `rank` of `world`'s block of `seeds`, its groups numbered as one
/// process numbers them.
fn run_share(
    episodes: Episodes,
    seeds: &[u64],
    policy: &mut dyn Policy,
    (rank, world): (usize, usize),
) -> Result<Outcome> {
    let mine = vagen_dist::share(seeds.len(), rank, world);
    let mut outcome = episodes.run(&seeds[mine.clone()], policy, &mut |_| Ok(()))?;
    outcome.trajectories.iter_mut().for_each(|t| t.group += mine.start);
    Ok(outcome)
}

/// [`held_out_rollouts`] over this rank's block of the held-out seeds.
/// (`progress`: shown, as `eval` does; a training run's own bar covers its evaluations.)
fn held_out_share(
    cfg: &TrainConfig,
    plugin: &dyn Plugin,
    model: Rc<Model>,
    ranks: &Ranks,
    progress: bool,
) -> Result<Outcome> {
    let seeds: Vec<u64> = (0..cfg.env.val_episodes as u64).map(|i| cfg.env.val_seed_start + i).collect();
    let stop = cfg.rollout.episodes.format.stop_strings();
    let options = cfg.rollout.sampling.options(SamplingFor::HeldOut, stop, cfg.schedule.seed);
    let mut policy = model_policy(cfg, model, options);
    let turns = plugin.max_turns((cfg.env.max_turns > 0).then_some(cfg.env.max_turns)) as u64;
    let bar = Progress::new(turns, "evaluation turns", progress && ranks.is_main(), 0);
    let mut watched = crate::progress::Watched { inner: &mut policy, bar };
    let (env_config, config) = (cfg.env_config_json(), cfg.rollout.rollout_config());
    let outcome =
        run_share(episodes(cfg, plugin, &env_config, &config, 1), &seeds, &mut watched, (ranks.rank(), ranks.world()));
    watched.bar.finish();
    outcome
}

/// The model answering rollouts within the run's sequence and image budgets.
pub(crate) fn model_policy(cfg: &TrainConfig, model: Rc<Model>, options: GenerateOptions) -> ModelPolicy {
    ModelPolicy::new(model, options)
        .with_context_window(cfg.rollout.sequences.max_sequence_tokens)
        .with_overflow(cfg.rollout.sequences.context_overflow)
        .with_max_image_tokens(cfg.rollout.sequences.max_image_tokens)
        .with_engine(&cfg.engine)
}

/// The episode loop over groups of `group_size` in `[env]`'s shape, with the run's
/// failure policy (`env.max_failure_rate`), all groups at once.
pub(crate) fn episodes<'a>(
    cfg: &TrainConfig,
    plugin: &'a dyn Plugin,
    env_config: &'a str,
    config: &'a RolloutConfig,
    group_size: usize,
) -> Episodes<'a> {
    let failures = FailurePolicy::new(cfg.env.max_failure_rate);
    let shape = crate::rollout_section::shape(cfg, group_size);
    Episodes { plugin, env_config, config, shape, failures, chunk_groups: 0 }
}

/// The run's sandbox and `env.plugin`, whose env configs it accepts.
struct OpenEnv {
    runtime: Runtime,
    plugin: Arc<dyn Plugin>,
}

fn open_env(cfg: &TrainConfig) -> Result<OpenEnv> {
    let runtime = Runtime::new(cfg.sandbox.clone())?;
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
    Ok(OpenEnv { runtime, plugin })
}

/// `model.path` (or the embedded default or default-vl, drawn from `schedule.seed`, its
/// tokenizer retrained on `plugin`'s texts) on `model.device` in `model.dtype`, with the
/// run's vision settings.
pub fn load_model(cfg: &TrainConfig, plugin: &dyn Plugin) -> Result<Model> {
    load_model_with(cfg, embedded_texts(cfg, plugin)?.as_ref())
}

/// The env's texts when `model.path` is the embedded model, which learns its words.
fn embedded_texts(cfg: &TrainConfig, plugin: &dyn Plugin) -> Result<Option<crate::vocabulary::EnvTexts>> {
    cfg.model.path.is_embedded().then(|| crate::vocabulary::env_texts(cfg, plugin)).transpose()
}

fn load_model_with(cfg: &TrainConfig, texts: Option<&crate::vocabulary::EnvTexts>) -> Result<Model> {
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
fn vision_settings(cfg: &TrainConfig, model: &mut Model) -> Result<()> {
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

/// `[model.lora]`'s adapters on a freshly loaded base (A drawn from `schedule.seed`).
pub(crate) fn attach_lora(cfg: &TrainConfig, model: &mut Model) -> Result<()> {
    if let Some(lora) = &cfg.model.lora {
        model.attach_lora(lora, cfg.schedule.seed).context("model.lora")?;
        if model.vision.is_some() {
            model.set_vision_trainable(!cfg.model.freeze_vision);
        }
    }
    Ok(())
}

/// A checkpoint's actor: the whole model, or with LoRA the base `model.path` names and the
/// saved adapter, which must have the config's settings.
fn load_actor(cfg: &TrainConfig, plugin: &dyn Plugin, dir: &Path) -> Result<Model> {
    let options = load_options(cfg)?;
    let Some(lora) = &cfg.model.lora else {
        return Ok(Model::load(dir, options)?);
    };
    let mut model = cfg.model.path.load_with_adapter(dir, cfg.schedule.seed, options).with_context(|| {
        format!("loading the model {} (model.path) with the adapter in {}", cfg.model.path, dir.display())
    })?;
    if let Some(texts) = embedded_texts(cfg, plugin)? {
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
fn new_critic(cfg: &TrainConfig, actor: &Model) -> Result<Option<ValueModel>> {
    if !cfg.algorithm.advantage.estimator.uses_critic() {
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

/// AdamW over `vars`, its moments sharded over the ranks with `optim.shard`.
fn new_optimizer(cfg: &TrainConfig, vars: std::collections::HashMap<String, tch::Tensor>, ranks: &Ranks) -> AdamW {
    match cfg.optim.shard {
        true => AdamW::new_sharded(vars, cfg.optim.weight_decay, ranks),
        false => AdamW::new(vars, cfg.optim.weight_decay),
    }
}

fn load_options(cfg: &TrainConfig) -> Result<LoadOptions> {
    Ok(LoadOptions { device: cfg.rank_device.unwrap_or(cfg.model.device).resolve()?, dtype: cfg.model.dtype })
}

/// A checkpoint's actor, critic, counters and optimiser moments, all or nothing.
#[allow(clippy::type_complexity)]
fn load_checkpoint(
    cfg: &TrainConfig,
    plugin: &dyn Plugin,
    ckpt: &Path,
) -> Result<(Model, Option<ValueModel>, TrainerState, (AdamW, Option<AdamW>))> {
    let options = load_options(cfg)?;
    let state = checkpoint::read_state(ckpt)?;
    let mut actor = load_actor(cfg, plugin, &ckpt.join("actor"))?;
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
    } else if cfg.algorithm.advantage.estimator.uses_critic() {
        let critic = new_critic(cfg, &actor)?.expect("a critic-based estimator");
        let opt = AdamW::new(critic.trainable(), cfg.optim.weight_decay);
        (Some(critic), Some(opt))
    } else {
        (None, None)
    };
    Ok((actor, critic, state, (actor_opt, critic_opt)))
}
