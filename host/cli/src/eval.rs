//! `vagen-host eval`: a model's success on held-out seeds, through the rollout path.

use crate::policy::PolicyKind;
use crate::run::RunArgs;
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub struct EvalArgs {
    /// A model folder (e.g. RUN/checkpoints/step-000100/actor) or `default`.
    #[arg(long)]
    model: String,
    #[arg(long)]
    plugin: PathBuf,
    #[arg(long, default_value_t = 256)]
    episodes: usize,
    /// Episode i uses seed S + i; keep it away from the training seeds (default 2^40, as
    /// the trainer's held-out seeds).
    #[arg(long, default_value_t = 1 << 40)]
    seed: u64,
    #[arg(long, default_value = "free-think")]
    format: String,
    /// 0: greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f64,
    #[arg(long, default_value_t = 128)]
    max_new_tokens: usize,
    #[arg(long)]
    max_turns: Option<u32>,
    #[arg(long, default_value = "")]
    env_config: String,
    #[arg(long, default_value = "auto")]
    device: String,
    #[arg(long, default_value = "f32")]
    dtype: String,
    #[arg(long)]
    out: Option<PathBuf>,
    #[arg(long)]
    json: bool,
}

pub fn eval(a: EvalArgs) -> Result<()> {
    crate::run::run(RunArgs {
        plugin: Some(a.plugin),
        replay: None,
        max_failure_rate: 0.25,
        policy: PolicyKind::Model,
        episodes: a.episodes,
        seed: a.seed,
        env_config: a.env_config,
        max_turns: a.max_turns,
        out: a.out,
        json: a.json,
        parallel: None,
        limits: vec![],
        format: Some(a.format),
        group_size: 1,
        history: "all".into(),
        model: a.model,
        device: a.device,
        dtype: a.dtype,
        temperature: a.temperature,
        max_new_tokens: a.max_new_tokens,
    })
}
