//! `vagen-host train | sft | eval`: the training loop, the warm start alone, and a standalone
//! evaluation of a checkpoint.

use anyhow::{Context, Result, bail};
use clap::Args;
use std::path::PathBuf;
use vagen_trainer::{JudgeAccess, TrainConfig, Trainer};

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
}

impl TrainArgs {
    fn trainer(&self) -> Result<Trainer> {
        let access = JudgeAccess::from_user(self.judge_key_env.clone(), self.judge_host.clone())?;
        if let Some(dir) = &self.resume {
            return Trainer::resume_with(dir, &self.overrides, self.allow_native, access);
        }
        let path = self.config.as_ref().expect("clap requires --config without --resume");
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut cfg = TrainConfig::parse(&text, &path.display().to_string(), &self.overrides)?;
        cfg.allow_native = self.allow_native;
        cfg.judge_access = access;
        let run_dir = self.run_dir.clone().unwrap_or_else(|| {
            let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "run".into());
            PathBuf::from("runs").join(stem)
        });
        Trainer::new(cfg, &run_dir)
    }
}

pub fn train(a: TrainArgs) -> Result<()> {
    let mut t = a.trainer()?;
    let (start, end) = t.run()?;
    println!("held-out success: {start:.3} after SFT -> {end:.3} after RL ({:+.3})", end - start);
    println!("run folder: {} (metrics.jsonl, report.html, checkpoints/)", t.run_dir.display());
    Ok(())
}

pub fn sft(a: TrainArgs) -> Result<()> {
    let mut t = a.trainer()?;
    if t.cfg.sft.steps == 0 {
        bail!("sft.steps is 0 in the config: nothing to do (set it, e.g. --set sft.steps=50)");
    }
    t.sft()?;
    let success = t.evaluate()?;
    t.save_now()?;
    println!("held-out success after {} SFT steps: {success:.3}", t.cfg.sft.steps);
    Ok(())
}
