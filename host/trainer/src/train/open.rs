//! Opening a run: the public constructors, a new run or a resumed one, each turning what
//! `setup` built into a [`Trainer`].

use super::Trainer;
use crate::config::TrainConfig;
use crate::judge_access::JudgeAccess;
use crate::setup::{self, Parts};
use anyhow::Result;
use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;
use vagen_dist::Rendezvous;

impl Trainer {
    /// A new run in `run_dir` (created; must not hold a run already).
    pub fn new(cfg: TrainConfig, run_dir: &Path) -> Result<Self> {
        Self::new_ranked(cfg, run_dir, None)
    }

    /// [`Trainer::new`] as one of the ranks `rdzv` describes (none: one process): rank 0
    /// makes and writes the run folder.
    pub fn new_ranked(cfg: TrainConfig, run_dir: &Path, rdzv: Option<&Rendezvous>) -> Result<Self> {
        setup::new_ranked(cfg, run_dir, rdzv).map(Self::from_parts)
    }

    /// Continues the run in `run_dir` from its last complete checkpoint. A native plugin
    /// is refused, and a judge reaches only loopback: the run folder's config may come from
    /// someone else.
    pub fn resume(run_dir: &Path, overrides: &[String]) -> Result<Self> {
        Self::resume_with(run_dir, overrides, false, JudgeAccess::default())
    }

    /// [`Trainer::resume`] with what only the user's command line grants: a native
    /// `env.plugin` (`--allow-native`) and the judge's hosts and key.
    pub fn resume_with(
        run_dir: &Path,
        overrides: &[String],
        allow_native: bool,
        judge_access: JudgeAccess,
    ) -> Result<Self> {
        Self::resume_ranked(run_dir, overrides, allow_native, judge_access, None)
    }

    /// [`Trainer::resume_with`] as one of `ranks` (every rank reads the same checkpoint,
    /// whatever world size wrote it: checkpoints are whole).
    pub fn resume_ranked(
        run_dir: &Path,
        overrides: &[String],
        allow_native: bool,
        judge_access: JudgeAccess,
        rdzv: Option<&Rendezvous>,
    ) -> Result<Self> {
        setup::resume_ranked(run_dir, overrides, allow_native, judge_access, rdzv).map(Self::from_parts)
    }

    fn from_parts(p: Parts) -> Self {
        Trainer {
            cfg: p.cfg,
            run_dir: p.run_dir,
            plugin: p.plugin,
            actor: Rc::new(p.actor),
            merged: p.merged.map(Rc::new),
            critic: p.critic,
            reference: None,
            actor_opt: p.actor_opt,
            critic_opt: p.critic_opt,
            state: p.state,
            metrics: p.metrics,
            ranks: p.ranks,
            pipeline: None,
            _runtime: p.runtime,
            rewards: RefCell::new(p.rewards),
            skipped: Default::default(),
            warnings: Default::default(),
            _lock: p.lock,
        }
    }
}
