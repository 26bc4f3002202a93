//! `vagen-host train | sft | eval`: the training loop, the warm start alone, and a standalone
//! evaluation of a checkpoint.

use anyhow::{Result, bail};
use clap::Args;
use std::path::PathBuf;
use vagen_trainer::{JudgeAccess, Rendezvous, TrainConfig, Trainer};

#[derive(Args)]
pub struct TrainArgs {
    /// The run's TOML config (see examples/frozenlake-cpu.toml). Not needed with --resume.
    #[arg(long, required_unless_present = "resume")]
    config: Option<PathBuf>,
    /// Where the run's config, metrics, checkpoints, samples and report go.
    #[arg(long)]
    run_dir: Option<PathBuf>,
    /// Continue the run in this folder from its last complete checkpoint.
    #[arg(long, value_name = "RUN_DIR", conflicts_with = "config")]
    resume: Option<PathBuf>,
    /// Start a new run in `--run-dir` even though it holds one (e.g. one killed before its
    /// first checkpoint): the old folder is moved aside whole, to `RUN_DIR.previous-K`.
    #[arg(long, requires = "config")]
    restart: bool,
    /// Override a config field, e.g. `--set optim.actor_lr=1e-5` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
    /// Let `env.plugin` name a native `.so`, which runs unsandboxed with your permissions
    /// (a config file alone never can: it may come from someone else).
    #[arg(long)]
    allow_native: bool,
    /// The environment variable holding the `openai` judge's API key (none is sent
    /// otherwise; `api_key_env` in ~/.config/vagen/judge.toml says the same). A config file
    /// cannot name it: it could send any secret anywhere.
    #[arg(long, value_name = "VAR")]
    judge_key_env: Option<String>,
    /// A host the `openai` judge may reach besides this machine's loopback (repeatable;
    /// `hosts` in ~/.config/vagen/judge.toml adds more).
    #[arg(long, value_name = "HOST")]
    judge_host: Vec<String>,
    /// Start this many data-parallel ranks on this machine (as `torchrun --nproc-per-node N
    /// --no-python vagen-host train …` would); under torchrun, Slurm or a PyTorchJob the
    /// launcher's variables say the rank instead.
    #[arg(long, value_name = "N")]
    nproc: Option<usize>,
    /// Train the config from N seeds (`schedule.seed`, +1, …), one after another, each in
    /// `RUN_DIR/seed-S/`; print each seed's held-out figures and their mean ± sd (also in
    /// `RUN_DIR/seeds.json`). The same command again continues where it stopped.
    #[arg(long, value_name = "N", requires = "config", conflicts_with_all = ["resume", "restart", "nproc"])]
    seeds: Option<usize>,
}

impl TrainArgs {
    fn trainer(&self) -> Result<Trainer> {
        let access = JudgeAccess::from_user(self.judge_key_env.clone(), self.judge_host.clone())?;
        let rdzv = Rendezvous::from_env()?;
        if let Some(dir) = &self.resume {
            return Trainer::resume_ranked(dir, &self.overrides, self.allow_native, access, rdzv.as_ref());
        }
        let (cfg, run_dir) = self.config(access)?;
        let main = rdzv.as_ref().is_none_or(|r| r.rank == 0);
        if self.restart && main && run_dir.join("config.toml").exists() {
            let aside = vagen_trainer::set_run_aside(&run_dir)?;
            eprintln!("--restart: the earlier run in {} is now {}", run_dir.display(), aside.display());
        }
        Trainer::new_ranked(cfg, &run_dir, rdzv.as_ref())
    }

    /// The config as read and overridden, and the run folder (`runs/STEM` by default).
    fn config(&self, access: JudgeAccess) -> Result<(TrainConfig, PathBuf)> {
        let path = self.config.as_ref().expect("clap requires --config without --resume");
        let mut cfg = TrainConfig::from_file(path, &self.overrides)?;
        cfg.allow_native = self.allow_native;
        cfg.judge_access = access;
        let run_dir = self.run_dir.clone().unwrap_or_else(|| {
            let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "run".into());
            PathBuf::from("runs").join(stem)
        });
        Ok((cfg, run_dir))
    }

    /// With `--seeds N`: the config over N seeds.
    fn over_seeds(&self) -> Option<Result<()>> {
        let n = self.seeds?;
        Some((|| {
            if Rendezvous::from_env()?.is_some() {
                bail!(
                    "--seeds runs its seeds one after another in this process: start it without a launcher (torchrun, srun)"
                );
            }
            let access = JudgeAccess::from_user(self.judge_key_env.clone(), self.judge_host.clone())?;
            let (cfg, run_dir) = self.config(access.clone())?;
            let (overrides, allow_native) = (self.overrides.clone(), self.allow_native);
            crate::seeds::SeedRuns { cfg, n, run_dir, overrides, allow_native, access }.run()
        })())
    }

    /// With `--nproc`: this command line, less `--nproc`, as that many ranks.
    fn launched(&self) -> Option<Result<()>> {
        let n = self.nproc?;
        // Long enough for every rank to start and join; each rank's own `timeout_s` governs
        // the run.
        Some(crate::launch::relaunch(n, std::time::Duration::from_secs(600)))
    }
}

/// Runs `f` on the trainer; the other ranks learn of its failure (they stop, naming this
/// one) or of its end.
fn ranked<T>(t: &mut Trainer, f: impl FnOnce(&mut Trainer) -> Result<T>) -> Result<T> {
    match f(t) {
        Ok(v) => {
            t.ranks().finish();
            Ok(v)
        }
        Err(e) => {
            t.ranks().fail(&format!("{e:#}"));
            Err(e)
        }
    }
}

pub fn train(a: TrainArgs) -> Result<()> {
    if let Some(done) = a.launched().or_else(|| a.over_seeds()) {
        return done;
    }
    let mut t = a.trainer()?;
    let (start, end) = ranked(&mut t, |t| t.run())?;
    if !t.ranks().is_main() {
        return Ok(());
    }
    // The first figure is the policy RL started from: SFT's, or the model as loaded.
    let from = if t.cfg.sft.steps > 0 { "after SFT" } else { "before RL" };
    println!("held-out success: {start:.3} {from} -> {end:.3} after RL ({:+.3})", end - start);
    println!("run folder: {} (metrics.jsonl, report.html, checkpoints/)", t.run_dir.display());
    Ok(())
}

pub fn sft(a: TrainArgs) -> Result<()> {
    if a.seeds.is_some() {
        bail!("--seeds trains the whole config (`train --seeds N`); `sft` runs one seed");
    }
    if let Some(done) = a.launched() {
        return done;
    }
    let mut t = a.trainer()?;
    if t.cfg.sft.steps == 0 {
        bail!("sft.steps is 0 in the config: nothing to do (set it, e.g. --set sft.steps=50)");
    }
    let success = ranked(&mut t, |t| {
        t.sft()?;
        let success = t.evaluate()?;
        t.save_now()?;
        Ok(success)
    })?;
    if !t.ranks().is_main() {
        return Ok(());
    }
    println!("held-out success after {} SFT steps: {success:.3}", t.cfg.sft.steps);
    Ok(())
}
