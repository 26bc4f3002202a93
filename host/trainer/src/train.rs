//! The training loop: SFT warm start, then rollout → scores → advantages → filtering → PPO
//! epochs, with evaluation, checkpoints, metrics and resumption.

use crate::batch::{Micro, Row, logprobs_and_entropy};
use crate::checkpoint::{self, TrainerState};
use crate::config::{CriticInit, TrainConfig};
use crate::credit::Laid;
use crate::explore::Exploring;
use crate::metrics::{MetricsLog, StepMetrics};
use crate::optimizer::AdamW;
use crate::sft::NoisyOracle;
use crate::{PolicyLossInput, policy_loss, value_loss};
use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;
use tch::Kind;
use vagen_model::{DType, GenerateOptions, LoadOptions, Model, ModelPolicy, ValueModel};
use vagen_rollout::{History, LayoutOptions, RolloutConfig, TrainingSequence, Trajectory, layout, rollout};
use vagen_runtime::{Plugin, Runtime};

/// Seeds per SFT step are drawn from this many per step, below the RL seeds.
const SFT_SEED_STRIDE: u64 = 1024;

pub struct Trainer {
    pub cfg: TrainConfig,
    pub run_dir: PathBuf,
    plugin: Arc<dyn Plugin>,
    pub actor: Rc<Model>,
    critic: Option<ValueModel>,
    /// The frozen policy the KL penalty pulls towards: the actor as RL began (after SFT),
    /// kept in `run_dir/reference/` so a resumed run uses the same one. Only with a KL
    /// penalty configured.
    reference: Option<Model>,
    actor_opt: AdamW,
    critic_opt: Option<AdamW>,
    pub state: TrainerState,
    log: MetricsLog,
    _runtime: Runtime,
    /// Updates in a row (SFT or RL steps) whose every optimiser step was skipped for a
    /// non-finite gradient norm.
    skipped_in_a_row: usize,
}

/// Steps in a row with no applied update before the run stops: a diverged loss does not
/// come back by itself, and going on would only burn time on an unchanged model.
const MAX_SKIPPED_IN_A_ROW: usize = 3;

impl Trainer {
    /// A new run in `run_dir` (created; must not hold a run already).
    pub fn new(cfg: TrainConfig, run_dir: &Path) -> Result<Self> {
        if run_dir.join("config.toml").exists() {
            bail!("{} already holds a run: resume it with --resume, or choose another --run-dir", run_dir.display());
        }
        std::fs::create_dir_all(run_dir).with_context(|| format!("creating {}", run_dir.display()))?;
        let actor = load_model(&cfg)?;
        let critic = new_critic(&cfg, &actor)?;
        let t = Self::assemble(cfg, run_dir, actor, critic, TrainerState::default(), None)?;
        // Written once everything it names has loaded and been accepted, so a folder with a
        // config.toml always holds a run that can be resumed (or restarted elsewhere).
        std::fs::write(run_dir.join("config.toml"), t.cfg.to_toml())?;
        Ok(t)
    }

    /// Continues the run in `run_dir` from its last complete checkpoint. A native plugin
    /// is refused: the run folder's config may come from someone else.
    pub fn resume(run_dir: &Path, overrides: &[String]) -> Result<Self> {
        Self::reopen(run_dir, overrides, false)
    }

    /// [`Trainer::resume`] trusting a native `env.plugin` (`--allow-native`).
    pub fn resume_allowing_native(run_dir: &Path, overrides: &[String]) -> Result<Self> {
        Self::reopen(run_dir, overrides, true)
    }

    fn reopen(run_dir: &Path, overrides: &[String], allow_native: bool) -> Result<Self> {
        let path = run_dir.join("config.toml");
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let mut cfg = TrainConfig::parse(&text, &path.display().to_string(), overrides)?;
        cfg.allow_native = allow_native;
        // The newest checkpoint that loads whole; a corrupt one (a truncated file, a disk
        // error) is skipped with a warning, never half used.
        let mut refused = Vec::new();
        for ckpt in checkpoint::complete(run_dir)? {
            let loaded = match load_checkpoint(&cfg, &ckpt) {
                Ok(loaded) => loaded,
                Err(e) => {
                    // Moved aside (kept for a look), so later saves and resumes pass it by.
                    let name = ckpt.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                    let aside = ckpt.with_file_name(format!(".{name}.corrupt"));
                    let moved = std::fs::rename(&ckpt, &aside).is_ok();
                    let to = if moved { format!(", moved to {}", aside.display()) } else { String::new() };
                    eprintln!("warning: {} will not load ({e:#}){to}; trying the one before", ckpt.display());
                    refused.push(format!("{}: {e:#}", ckpt.display()));
                    continue;
                }
            };
            let (actor, critic, state, optims) = loaded;
            let t = Self::assemble(cfg, run_dir, actor, critic, state, Some(optims))?;
            // Appended, not rewritten: lines past the checkpoint stay, and readers take the
            // ones after this mark (`metrics::read`).
            t.log.mark_resumed(&t.state)?;
            eprintln!(
                "resuming {} at step {} ({} SFT steps done; checkpoint {})",
                run_dir.display(),
                t.state.step,
                t.state.sft_steps_done,
                ckpt.display()
            );
            return Ok(t);
        }
        if refused.is_empty() {
            bail!("{} has no complete checkpoint to resume from", run_dir.display());
        }
        bail!("no checkpoint of {} loads: {}", run_dir.display(), refused.join("; "))
    }

    fn assemble(
        cfg: TrainConfig,
        run_dir: &Path,
        actor: Model,
        critic: Option<ValueModel>,
        state: TrainerState,
        optims: Option<(AdamW, Option<AdamW>)>,
    ) -> Result<Self> {
        tch::manual_seed(cfg.schedule.seed as i64);
        let runtime = Runtime::new(cfg.sandbox.clone())?;
        let plugin = runtime
            .load_named_in(&cfg.env.plugin, Path::new("the training config (env.plugin)"), cfg.allow_native)
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
        let (actor_opt, critic_opt) = optims.unwrap_or_else(|| {
            let actor_opt = AdamW::new(actor.vs.variables(), cfg.optim.weight_decay);
            (actor_opt, critic.as_ref().map(|c| AdamW::new(c.vs.variables(), cfg.optim.weight_decay)))
        });
        let log = MetricsLog::open(&run_dir.join("metrics.jsonl"))?;
        Ok(Trainer {
            cfg,
            run_dir: run_dir.to_path_buf(),
            plugin,
            actor: Rc::new(actor),
            critic,
            reference: None,
            actor_opt,
            critic_opt,
            state,
            log,
            _runtime: runtime,
            skipped_in_a_row: 0,
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
            self.log.write(&m)?;
            eprintln!("held-out success before RL: {:.3}", v.success);
        }
        let bar = bar(self.cfg.schedule.steps as u64, "RL steps");
        bar.set_position(self.state.step as u64);
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
            self.log.write(&m)?;
            bar.set_message(format!(
                "success {:.2} val {}",
                m.values.get("train/success").copied().unwrap_or(0.0),
                self.state.last_success.map_or("-".into(), |v| format!("{v:.2}"))
            ));
            bar.inc(1);
            if every(self.cfg.schedule.save_every) || s == self.cfg.schedule.steps {
                self.save()?;
            }
        }
        bar.finish_and_clear();
        let start = self.state.start_success.unwrap_or(0.0);
        let end = match self.state.last_success {
            Some(v) => v,
            None => self.evaluate()?,
        };
        crate::report::write(&self.run_dir)?;
        Ok((start, end))
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
        checkpoint::save(
            &self.run_dir,
            &self.state,
            &self.actor,
            self.critic.as_ref().zip(self.critic_opt.as_ref()),
            &self.actor_opt,
            self.cfg.schedule.keep_last,
        )
    }

    /// Supervised steps on (noisy) oracle trajectories through the rollout path; cross-
    /// entropy on assistant tokens only.
    pub fn sft(&mut self) -> Result<()> {
        let cfg = self.cfg.clone();
        let bar = bar(cfg.sft.steps as u64, "SFT steps");
        bar.set_position(self.state.sft_steps_done as u64);
        while self.state.sft_steps_done < cfg.sft.steps {
            // With a fixed dataset, every step replays the same episodes.
            let k = match cfg.sft.dataset_steps {
                0 => self.state.sft_steps_done as u64,
                n => (self.state.sft_steps_done % n) as u64,
            };
            let seeds: Vec<u64> = (0..cfg.sft.episodes_per_step as u64)
                .map(|i| cfg.env.train_seed_start + k * SFT_SEED_STRIDE + i)
                .collect();
            let mut policy =
                NoisyOracle { format: cfg.rollout.format, noise: cfg.sft.action_noise, noisy: Default::default() };
            let trajs = rollout(
                self.plugin.as_ref(),
                &cfg.train_env_config_json(),
                &seeds,
                &rollout_config(&self.cfg, 1),
                &mut policy,
            )?;
            let n = self.state.sft_steps_done + 1;
            self.check_failures(&trajs, &format!("SFT step {n}"), &format!("sft{n}"), &cfg.train_env_config_json())?;
            let seqs = self.layout_all(&trajs)?;
            // Turns whose action was a random replacement move the episode but are not
            // imitated: only the oracle's answers are targets.
            let rows: Vec<Row> = seqs
                .iter()
                .map(|l| {
                    let s = &l.seq;
                    let mut row = base_row(s);
                    for k in 0..s.turn_ends.len() {
                        if policy.noisy.contains(&(l.traj, l.turn.unwrap_or(k))) {
                            let start = if k == 0 { 0 } else { s.turn_ends[k - 1] + 1 };
                            row.loss_mask[start..=s.turn_ends[k]].iter_mut().for_each(|m| *m = false);
                        }
                    }
                    row
                })
                .collect();
            // Mean cross-entropy over the step's assistant tokens, accumulated as sums.
            let mut total = 0.0;
            let all_tokens = rows.iter().map(|r| r.loss_mask.iter().filter(|&&m| m).count()).sum::<usize>().max(1);
            for chunk in rows.chunks(cfg.optim.micro_batch) {
                let refs: Vec<&Row> = chunk.iter().collect();
                let micro = Micro::new(&refs, self.actor.device());
                let (logp, _) = logprobs_and_entropy(&self.actor.lm, &micro, 1.0);
                let nll = -(logp * &micro.loss_mask).sum(Kind::Float);
                total += nll.double_value(&[]);
                (nll / all_tokens as f64).backward();
            }
            let report = self.actor_opt.step(cfg.sft.lr, cfg.optim.grad_clip);
            self.count_skipped(report.applied, &format!("SFT step {}", self.state.sft_steps_done + 1), "sft.lr")?;
            self.state.sft_steps_done += 1;
            let mut m = StepMetrics::new(0);
            m.values.insert("sft/loss".into(), total / all_tokens as f64);
            m.values.insert("sft/grad_norm".into(), report.grad_norm);
            m.values.insert("sft/step".into(), self.state.sft_steps_done as f64);
            self.log.write(&m)?;
            bar.inc(1);
            let n = self.state.sft_steps_done;
            if n == cfg.sft.steps || (cfg.sft.save_every > 0 && n.is_multiple_of(cfg.sft.save_every)) {
                self.save()?;
            }
        }
        bar.finish_and_clear();
        self.critic_from_actor()
    }

    /// RL starts from the fine-tuned actor, so an `actor` critic is a copy of that one; it
    /// learned nothing during SFT. Once RL has updated it (step > 0), it is never replaced.
    fn critic_from_actor(&mut self) -> Result<()> {
        if self.critic.is_some() && self.cfg.critic.init == CriticInit::Actor && self.state.step == 0 {
            self.critic = new_critic(&self.cfg, &self.actor)?;
            let wd = self.cfg.optim.weight_decay;
            self.critic_opt = self.critic.as_ref().map(|c| AdamW::new(c.vs.variables(), wd));
        }
        Ok(())
    }

    /// Training sequences: one per trajectory, or one per turn (`rollout.per_turn`), each
    /// with the index of its trajectory and, per turn, of its turn.
    fn layout_all(&self, trajs: &[Trajectory]) -> Result<Vec<Laid>> {
        let options =
            LayoutOptions { max_tokens: self.cfg.rollout.max_sequence_tokens, rewards: self.cfg.rollout.rewards };
        let mut out = Vec::new();
        for (i, t) in trajs.iter().enumerate() {
            if t.failure.is_some() || t.turns.is_empty() {
                continue;
            }
            let turns = t.assistant_turns();
            if self.cfg.rollout.per_turn {
                for (k, turn) in turns.into_iter().enumerate() {
                    let seq = layout(self.actor.as_ref(), &t.system, &[turn], &options)?;
                    out.push(Laid { traj: i, turn: Some(k), seq });
                }
            } else {
                out.push(Laid { traj: i, turn: None, seq: layout(self.actor.as_ref(), &t.system, &turns, &options)? });
            }
        }
        Ok(out)
    }

    /// Held-out success over `env.val_episodes` seeds at the evaluation temperature.
    pub fn evaluate(&self) -> Result<f64> {
        Ok(self.evaluate_all()?.success)
    }

    /// The held-out episodes' figures; their sample transcripts go to the run folder. A
    /// failed episode counts as a failure, and too many stop the run as in training.
    pub fn evaluate_all(&self) -> Result<vagen_rollout::RolloutMetrics> {
        let trajs = held_out_rollouts(&self.cfg, self.plugin.as_ref(), self.actor.clone())?;
        crate::report::save_samples(&self.run_dir, self.state.step, &trajs)?;
        let (what, file) = (format!("the evaluation at step {}", self.state.step), format!("eval{}", self.state.step));
        self.check_failures(&trajs, &what, &file, &self.cfg.env_config_json())?;
        Ok(vagen_rollout::metrics(&trajs))
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

    /// Stops the run when more than `env.max_failure_rate` of `trajs` failed, naming the
    /// plugin and the first error, with a reproducer of it in the run folder
    /// (`failure-{file}-seed{seed}.json`).
    fn check_failures(&self, trajs: &[Trajectory], what: &str, file: &str, env_config: &str) -> Result<()> {
        let failed = trajs.iter().filter(|t| t.failure.is_some()).count();
        if failed as f64 <= self.cfg.env.max_failure_rate * trajs.len() as f64 {
            return Ok(());
        }
        let bad = trajs.iter().find(|t| t.failure.is_some()).expect("some trajectory failed");
        let path = self.run_dir.join(format!("failure-{file}-seed{}.json", bad.seed));
        let answers = bad.answers();
        let error = bad.failure.as_deref().unwrap_or("");
        let reproducer = vagen_runtime::fuzz::Reproducer::failure(
            self.plugin.as_ref(),
            env_config,
            bad.seed,
            answers.clone(),
            error,
            // A failed step's answer is the last one; a failed reset has none. Anything else
            // (the oracle, the policy) is not a call a replay of the answers makes.
            (bad.failed_answer.is_some() || bad.failure.as_deref().is_some_and(|f| f.starts_with("reset:")))
                .then_some(answers.len()),
        );
        std::fs::write(&path, serde_json::to_string_pretty(&reproducer)?)?;
        bail!(
            "{failed} of {} trajectories failed in {what} (more than env.max_failure_rate {}); the env plugin {} faulted: {error}; reproducer: {} (replay with `vagen-host run --replay {}`)",
            trajs.len(),
            self.cfg.env.max_failure_rate,
            self.cfg.env.plugin.display(),
            path.display(),
            path.display()
        )
    }

    /// Loads the KL reference, first saving the current actor as it when the run has none
    /// yet (RL is starting). No-op without a KL penalty.
    fn ensure_reference(&mut self) -> Result<()> {
        if self.cfg.algorithm.policy_loss.kl.is_none() || self.reference.is_some() {
            return Ok(());
        }
        let dir = self.run_dir.join("reference");
        if !dir.join("config.json").is_file() {
            // Written aside and renamed, so a crash never leaves half a reference behind.
            let tmp = self.run_dir.join("reference.partial");
            let _ = std::fs::remove_dir_all(&tmp);
            self.actor.save(&tmp).context("saving the KL reference policy")?;
            std::fs::rename(&tmp, &dir).with_context(|| format!("moving the KL reference to {}", dir.display()))?;
        }
        let reference = Model::load(&dir, load_options(&self.cfg)?)
            .with_context(|| format!("loading the KL reference policy from {}", dir.display()))?;
        self.reference = Some(reference);
        Ok(())
    }

    /// One RL step. Everything random in it derives from the step number, so a resumed run
    /// makes the same rollouts.
    pub fn rl_step(&mut self) -> Result<StepMetrics> {
        self.ensure_reference()?;
        let cfg = self.cfg.clone();
        let step = self.state.step as u64;
        let t0 = Instant::now();
        let base = cfg.env.train_seed_start + cfg.sft.steps as u64 * SFT_SEED_STRIDE;
        let seeds: Vec<u64> = (0..cfg.env.groups as u64).map(|g| base + step * cfg.env.groups as u64 + g).collect();
        let options = GenerateOptions {
            max_new_tokens: cfg.rollout.max_new_tokens,
            temperature: cfg.rollout.temperature,
            top_p: cfg.rollout.top_p,
            top_k: cfg.rollout.top_k,
            stop: vec!["</answer>".into()],
            seed: cfg.schedule.seed ^ step.wrapping_mul(0x9E37_79B9_7F4A_7C15),
            ..Default::default()
        };
        let mut policy = Exploring {
            inner: ModelPolicy::new(self.actor.clone(), options)
                .with_context_window(cfg.rollout.max_sequence_tokens)
                .with_overflow(cfg.rollout.context_overflow),
            format: cfg.rollout.format,
            rate: cfg.rollout.explore,
            at: cfg.rollout.explore_at,
            forced: Default::default(),
        };
        let trajs = rollout(
            self.plugin.as_ref(),
            &cfg.train_env_config_json(),
            &seeds,
            &rollout_config(&self.cfg, cfg.env.group_size),
            &mut policy,
        )?;
        let t_rollout = t0.elapsed().as_secs_f64();
        let rm = vagen_rollout::metrics(&trajs);
        // Judged before any work on the batch: a run that stops here has not updated on it.
        let n = self.state.step + 1;
        self.check_failures(&trajs, &format!("step {n}"), &format!("step{n}"), &cfg.train_env_config_json())?;
        let seqs = self.layout_all(&trajs)?;
        // Rows holding a turn the model did not sample: their old log-probs need a forward.
        let forced: Vec<bool> = seqs
            .iter()
            .map(|l| match l.turn {
                Some(turn) => policy.forced.contains(&(l.traj, turn)),
                None => (0..trajs[l.traj].turns.len()).any(|turn| policy.forced.contains(&(l.traj, turn))),
            })
            .collect();

        // Old log-probs and values from one no-grad forward, with the training code path
        // (the old log-probs from generation instead with `rollout.reuse_logprobs`).
        let t1 = Instant::now();
        let temperature = cfg.rollout.temperature.max(1e-6);
        let reuse = cfg.rollout.reuse_logprobs;
        let mut rows: Vec<Row> = seqs
            .iter()
            .map(|l| Row {
                old_logprobs: if reuse { l.seq.logprobs.clone() } else { vec![0.0; l.seq.ids.len()] },
                ..base_row(&l.seq)
            })
            .collect();
        // Which rows the no-grad forward covers: all of them when it computes the old
        // log-probs, a reference or values; with reused log-probs, only the forced ones.
        let all = !reuse || self.reference.is_some() || self.critic.is_some();
        let need: Vec<usize> = (0..rows.len()).filter(|&k| all || forced[k]).collect();
        if !need.is_empty() {
            let _g = tch::no_grad_guard();
            for chunk in need.chunks(cfg.optim.micro_batch) {
                let refs: Vec<&Row> = chunk.iter().map(|&k| &rows[k]).collect();
                let micro = Micro::new(&refs, self.actor.device());
                let logp = (!reuse || chunk.iter().any(|&k| forced[k]))
                    .then(|| logprobs_and_entropy(&self.actor.lm, &micro, temperature).0);
                // The reference's log-probs once per step here, not once per epoch in the update.
                let ref_logp = self.reference.as_ref().map(|r| logprobs_and_entropy(&r.lm, &micro, temperature).0);
                let values = match &self.critic {
                    Some(c) => Some(c.forward(&micro.ids, &micro.positions(), None)?),
                    None => None,
                };
                // Column j - 1 holds token j's log-prob, and the value of acting at token j
                // (read at the position before it): per token, with 0 for the first.
                let per_token = |t: &tch::Tensor, r: usize, n: usize| -> Result<Vec<f32>> {
                    let col = Vec::<f32>::try_from(t.get(r as i64).narrow(0, 0, n as i64 - 1).to_kind(Kind::Float))?;
                    Ok(std::iter::once(0.0).chain(col).collect())
                };
                for (r, &k) in chunk.iter().enumerate() {
                    let row = &mut rows[k];
                    let n = row.ids.len();
                    if let Some(lp) = &logp
                        && (!reuse || forced[k])
                    {
                        row.old_logprobs = per_token(lp, r, n)?;
                    }
                    if let Some(lp) = &ref_logp {
                        row.ref_logprobs = per_token(lp, r, n)?;
                    }
                    if let Some(v) = &values {
                        row.old_values = per_token(v, r, n)?;
                    }
                }
            }
        }
        let t_old = t1.elapsed().as_secs_f64();
        // How far the training forward is from what generation sampled with: a prompt that
        // differs from the one the policy saw, or numerics, show up here (verl logs the same).
        let diffs: Vec<f64> = if reuse {
            Vec::new()
        } else {
            rows.iter()
                .zip(&seqs)
                .zip(&forced)
                .filter(|(_, f)| !**f)
                .flat_map(|((r, l), _)| {
                    (0..r.ids.len())
                        .filter(|&j| r.loss_mask[j])
                        .map(|j| (r.old_logprobs[j] - l.seq.logprobs[j]).abs() as f64)
                })
                .collect()
        };

        let credit = crate::credit::assign(&cfg, &trajs, &seqs, &mut rows)?;
        let kept: Vec<Row> = rows.into_iter().zip(&credit.keep).filter(|(_, k)| **k).map(|(r, _)| r).collect();

        // PPO epochs over mini-batches, gradients accumulated over micro-batches.
        let t2 = Instant::now();
        let mut acc = Accumulator::default();
        // Whether any actor update ran, and whether one was applied: a step with nothing to
        // train on (every row filtered out) has not diverged.
        let (mut attempted, mut applied) = (false, false);
        let mut order: Vec<usize> = (0..kept.len()).collect();
        let mut rng = step.wrapping_mul(6364136223846793005).wrapping_add(cfg.schedule.seed);
        let lr_scale = cfg.optim.lr_scale(step as usize, cfg.schedule.steps);
        for _ in 0..cfg.optim.epochs {
            shuffle(&mut order, &mut rng);
            for mini in order.chunks(cfg.optim.mini_batch) {
                let mini_tokens: usize = mini.iter().map(|&k| kept[k].loss_mask.iter().filter(|&&m| m).count()).sum();
                for micro_ids in mini.chunks(cfg.optim.micro_batch) {
                    let refs: Vec<&Row> = micro_ids.iter().map(|&k| &kept[k]).collect();
                    let micro = Micro::new(&refs, self.actor.device());
                    let weight = micro.tokens as f64 / mini_tokens.max(1) as f64;
                    let (logp, entropy) = logprobs_and_entropy(&self.actor.lm, &micro, temperature);
                    let ref_logp = self.reference.is_some().then_some(&micro.ref_logprobs);
                    let out = policy_loss(
                        &cfg.algorithm.policy_loss,
                        &PolicyLossInput {
                            log_probs: &logp,
                            old_log_probs: &micro.old_logprobs,
                            advantages: &micro.advantages,
                            mask: &micro.loss_mask,
                            entropy: Some(&entropy),
                            ref_log_probs: ref_logp,
                        },
                    );
                    if ref_logp.is_some() {
                        acc.add("actor/kl", out.kl, weight);
                    }
                    (out.loss * weight).backward();
                    acc.add("actor/pg_loss", out.pg_loss, weight);
                    acc.add("actor/pg_clipfrac", out.clip_frac_high + out.clip_frac_low, weight);
                    acc.add("actor/ppo_kl", out.approx_kl, weight);
                    acc.add("actor/entropy", out.entropy, weight);
                    if let Some(critic) = &self.critic {
                        let values = critic.forward(&micro.ids, &micro.positions(), None)?;
                        let n = values.size()[1];
                        let v = value_loss(
                            &cfg.algorithm.value_loss,
                            &values.narrow(1, 0, n - 1),
                            &micro.old_values,
                            &micro.returns,
                            &micro.value_mask,
                        );
                        (v.loss * weight).backward();
                        acc.add("critic/vf_loss", v.value_loss, weight);
                        acc.add("critic/vf_clipfrac", v.clip_frac, weight);
                    }
                }
                let r = self.actor_opt.step(cfg.optim.actor_lr * lr_scale, cfg.optim.grad_clip);
                (attempted, applied) = (true, applied | r.applied);
                acc.add("actor/grad_norm", if r.grad_norm.is_finite() { r.grad_norm } else { 0.0 }, 1.0);
                acc.count("actor/skipped_steps", !r.applied);
                if let Some(opt) = &mut self.critic_opt {
                    let r = opt.step(cfg.optim.critic_lr * lr_scale, cfg.optim.grad_clip);
                    acc.add("critic/grad_norm", if r.grad_norm.is_finite() { r.grad_norm } else { 0.0 }, 1.0);
                    acc.count("critic/skipped_steps", !r.applied);
                }
            }
        }
        let t_update = t2.elapsed().as_secs_f64();
        self.count_skipped(applied || !attempted, &format!("RL step {}", self.state.step + 1), "optim.actor_lr")?;

        let t_step = t0.elapsed().as_secs_f64();
        let mut m = StepMetrics::new(self.state.step + 1);
        m.values.extend(acc.means());
        let tokens: usize = seqs.iter().map(|l| l.seq.ids.len()).sum();
        let response_tokens: usize = seqs.iter().map(|l| l.seq.loss_mask.iter().filter(|&&x| x).count()).sum();
        if !diffs.is_empty() {
            m.values.insert("rollout/logprob_diff_mean".into(), diffs.iter().sum::<f64>() / diffs.len() as f64);
            m.values.insert("rollout/logprob_diff_max".into(), diffs.iter().copied().fold(0.0, f64::max));
        }
        for (k, v) in [
            ("train/success", rm.success),
            ("train/pass_at_group", rm.pass_at_group),
            ("train/reward", rm.mean_reward),
            ("train/turns", rm.mean_turns),
            ("train/valid_action_rate", rm.valid_action_rate),
            ("train/format_correct_rate", rm.format_correct_rate),
            ("train/failed_trajectories", rm.failed as f64),
            ("train/out_of_context_trajectories", rm.truncated_context as f64),
            ("train/truncated_sequences", seqs.iter().filter(|l| l.seq.truncated).count() as f64),
            ("rollout/response_length", rm.mean_response_tokens.unwrap_or(0.0)),
            ("rollout/in_group_std", credit.before.mean_in_group_std),
            ("rollout/in_group_mean", credit.before.mean_in_group_mean),
            ("rollout/in_group_std_kept", credit.after.mean_in_group_std),
            ("rollout/kept_trajectories", kept.len() as f64),
            ("rollout/zero_advantage_dropped", credit.zero_dropped as f64),
            ("rollout/explored_turns", policy.forced.len() as f64),
            ("actor/lr", cfg.optim.actor_lr * lr_scale),
            ("timing_s/rollout", t_rollout),
            ("timing_s/old_log_prob", t_old),
            ("timing_s/update", t_update),
            ("timing_s/step", t_step),
            ("throughput/tokens_per_s", tokens as f64 / t_step),
            ("throughput/response_tokens", response_tokens as f64),
        ] {
            m.values.insert(k.into(), v);
        }
        Ok(m)
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
/// `Trainer::evaluate` and `vagen-host eval --config` measure.
pub fn held_out_rollouts(cfg: &TrainConfig, plugin: &dyn Plugin, model: Rc<Model>) -> Result<Vec<Trajectory>> {
    let seeds: Vec<u64> = (0..cfg.env.val_episodes as u64).map(|i| cfg.env.val_seed_start + i).collect();
    let options = GenerateOptions {
        max_new_tokens: cfg.rollout.max_new_tokens,
        temperature: cfg.rollout.val_temperature,
        top_p: 1.0,
        top_k: 0,
        stop: vec!["</answer>".into()],
        seed: cfg.schedule.seed,
        ..Default::default()
    };
    let mut policy = ModelPolicy::new(model, options)
        .with_context_window(cfg.rollout.max_sequence_tokens)
        .with_overflow(cfg.rollout.context_overflow);
    Ok(rollout(plugin, &cfg.env_config_json(), &seeds, &rollout_config(cfg, 1), &mut policy)?)
}

fn rollout_config(cfg: &TrainConfig, group_size: usize) -> RolloutConfig {
    let r = &cfg.rollout;
    RolloutConfig {
        format: r.format,
        group_size,
        max_turns: cfg.env.max_turns,
        max_actions_per_turn: cfg.env.max_actions_per_turn,
        max_actions_per_episode: 0,
        history: match (r.per_turn, r.history) {
            (true, _) => History::Last(0),
            (false, 0) => History::All,
            (false, k) => History::Last(k),
        },
        format_reward: r.format_reward,
        system_prompt: r.system_prompt.clone(),
        instructions: r.instructions,
        describe_state: r.describe_state,
        observation_text: r.observation_text,
        feedback: r.feedback,
        reminder: r.reminder,
    }
}

/// `model.path` (or the embedded default, drawn from `schedule.seed`) on `model.device`
/// in `model.dtype`.
pub fn load_model(cfg: &TrainConfig) -> Result<Model> {
    let options = load_options(cfg)?;
    Ok(if cfg.model.path == "default" {
        vagen_model::default_model(cfg.schedule.seed, options)?
    } else {
        Model::load(Path::new(&cfg.model.path), options)
            .with_context(|| format!("loading the model {} (model.path)", cfg.model.path))?
    })
}

/// A critic as `critic.init` says, beside `actor` (none for critic-free estimators).
fn new_critic(cfg: &TrainConfig, actor: &Model) -> Result<Option<ValueModel>> {
    if !cfg.algorithm.advantage.estimator.uses_critic() {
        return Ok(None);
    }
    Ok(Some(match cfg.critic.init {
        CriticInit::Actor => ValueModel::from_policy(actor)?,
        CriticInit::Seed => {
            ValueModel::random(actor.config().clone(), cfg.schedule.seed.wrapping_add(1), load_options(cfg)?)?
        }
    }))
}

fn load_options(cfg: &TrainConfig) -> Result<LoadOptions> {
    Ok(LoadOptions { device: vagen_model::parse_device(&cfg.model.device)?, dtype: cfg.model.dtype.parse::<DType>()? })
}

fn bar(len: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    let style = format!("{{bar:30}} {{pos}}/{{len}} {what} [{{elapsed}}<{{eta}}] {{msg}}");
    bar.set_style(ProgressStyle::with_template(&style).expect("valid template"));
    bar
}

fn base_row(s: &TrainingSequence) -> Row {
    let n = s.ids.len();
    Row {
        ids: s.ids.clone(),
        loss_mask: s.loss_mask.clone(),
        old_logprobs: vec![0.0; n],
        ref_logprobs: vec![0.0; n],
        advantages: vec![0.0; n],
        returns: vec![0.0; n],
        old_values: vec![0.0; n],
        value_mask: vec![false; n],
    }
}

/// Epoch averages: each value weighted by its micro-batch's share of its mini-batch, then
/// averaged over mini-batches (not the last mini-batch's value).
#[derive(Default)]
struct Accumulator {
    sums: std::collections::BTreeMap<String, (f64, f64)>,
}

impl Accumulator {
    fn add(&mut self, key: &str, value: f64, weight: f64) {
        let e = self.sums.entry(key.to_string()).or_insert((0.0, 0.0));
        e.0 += value * weight;
        e.1 += weight;
    }
    fn count(&mut self, key: &str, hit: bool) {
        let e = self.sums.entry(key.to_string()).or_insert((0.0, 0.0));
        e.0 += hit as u8 as f64;
        e.1 = 1.0;
    }
    fn means(&self) -> impl Iterator<Item = (String, f64)> + '_ {
        self.sums.iter().map(|(k, (s, w))| (k.clone(), if *w > 0.0 { s / w } else { 0.0 }))
    }
}

/// Fisher–Yates with a 64-bit LCG: the order depends only on the step and the seed.
fn shuffle(v: &mut [usize], state: &mut u64) {
    for i in (1..v.len()).rev() {
        *state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let j = ((*state >> 33) % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}

/// A checkpoint's actor, critic, counters and optimiser moments, all or nothing.
#[allow(clippy::type_complexity)]
fn load_checkpoint(
    cfg: &TrainConfig,
    ckpt: &Path,
) -> Result<(Model, Option<ValueModel>, TrainerState, (AdamW, Option<AdamW>))> {
    let options = load_options(cfg)?;
    let state = checkpoint::read_state(ckpt)?;
    let actor = Model::load(&ckpt.join("actor"), options)?;
    let mut actor_opt = AdamW::new(actor.vs.variables(), cfg.optim.weight_decay);
    actor_opt.load(&ckpt.join("actor_optim.safetensors")).map_err(anyhow::Error::msg)?;
    // The critic starts at RL: a checkpoint from before it (SFT) has none to load; one from
    // RL without it is incomplete.
    let has_critic = ckpt.join("critic").is_dir();
    if cfg.algorithm.advantage.estimator.uses_critic() && state.step > 0 && !has_critic {
        anyhow::bail!("it has no critic/ folder, and RL has trained one");
    }
    let (critic, critic_opt) = if cfg.algorithm.advantage.estimator.uses_critic() && has_critic {
        let critic = ValueModel::from_spec(ckpt.join("critic").to_str().context("non-UTF-8 path")?, options)?;
        let mut opt = AdamW::new(critic.vs.variables(), cfg.optim.weight_decay);
        opt.load(&ckpt.join("critic_optim.safetensors")).map_err(anyhow::Error::msg)?;
        (Some(critic), Some(opt))
    } else if cfg.algorithm.advantage.estimator.uses_critic() {
        let critic = new_critic(cfg, &actor)?.expect("a critic-based estimator");
        let opt = AdamW::new(critic.vs.variables(), cfg.optim.weight_decay);
        (Some(critic), Some(opt))
    } else {
        (None, None)
    };
    Ok((actor, critic, state, (actor_opt, critic_opt)))
}
