//! `vagen-host bench <what>`: every benchmark under one command, each printing figures.
//! The flags several benches take are one struct each here, flattened into those that take
//! them: the model ([`Subject`]: `--model`, `--adapter`, `--device`, `--dtype` or a random
//! shape's `--config`), the device of the benches that run on the CPU unless told
//! ([`CpuByDefault`]), the training config whose RL steps are timed ([`TimedConfig`]) and
//! `--json` ([`JsonOutput`]).
//!
//! The env bench's flags are also taken straight after `bench` (`bench --plugin F`, the form
//! from before `bench` had subcommands), and the old `bench-model`, … names stay as hidden
//! commands for one release (see `main.rs`).

use crate::model_args::ModelArgs;
use crate::{bench_async, bench_dp, bench_harness, bench_model, bench_reward, bench_rollout, bench_train};
use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use vagen_model::DeviceChoice;

#[derive(Args)]
#[command(
    args_conflicts_with_subcommands = true,
    arg_required_else_help = true,
    subcommand_value_name = "BENCHMARK",
    subcommand_help_heading = "Benchmarks"
)]
pub struct BenchArgs {
    #[command(subcommand)]
    what: Option<Bench>,
    #[command(flatten, next_help_heading = "`bench --plugin F ...` is `bench env --plugin F ...`")]
    env: Option<vagen_env::bench::BenchArgs>,
}

#[derive(Subcommand)]
pub enum Bench {
    /// Generation throughput (prefill and decode tokens/s), optionally next to transformers
    /// on the same shape.
    Model(bench_model::BenchModelArgs),
    /// A multi-turn rollout workload (groups x members x turns, growing history) on the
    /// static engine, the continuous engine and transformers' `generate`.
    Rollout(bench_rollout::BenchRolloutArgs),
    /// What a reward component costs per turn, and judge throughput locally and through
    /// `serve`.
    Reward(bench_reward::BenchRewardArgs),
    /// What an update step costs, full-parameter against LoRA ranks: tokens/s, trainable
    /// parameters, optimiser state, peak memory.
    Train(bench_train::BenchTrainArgs),
    /// Data-parallel scaling: RL steps at each world size, and ZeRO-1's optimiser state per
    /// rank on a model shape.
    Dp(bench_dp::BenchDpArgs),
    /// RL steps per minute at each `[async] max_staleness`, and where the time goes.
    Async(bench_async::BenchAsyncArgs),
    /// What a harness's chat call costs through a run's recording endpoint, against the
    /// same call answered in the process.
    Harness(bench_harness::BenchHarnessArgs),
    /// Load, instantiate, reset and step costs of env plugins (`vagen-env bench`).
    Env(vagen_env::bench::BenchArgs),
}

impl Bench {
    pub fn run(self) -> Result<()> {
        match self {
            Bench::Model(a) => bench_model::bench_model(a),
            Bench::Rollout(a) => bench_rollout::bench_rollout(a),
            Bench::Reward(a) => bench_reward::bench_reward(a),
            Bench::Train(a) => bench_train::bench_train(a),
            Bench::Dp(a) => bench_dp::bench_dp(a),
            Bench::Async(a) => bench_async::bench_async(a),
            Bench::Harness(a) => bench_harness::bench_harness(a),
            Bench::Env(a) => vagen_env::bench::bench(a),
        }
    }
}

pub fn bench(a: BenchArgs) -> Result<()> {
    match (a.what, a.env) {
        (Some(what), _) => what.run(),
        (None, Some(env)) => Bench::Env(env).run(),
        (None, None) => bail!("name a benchmark (`vagen-host bench --help` lists them)"),
    }
}

/// The model a benchmark runs: `--model` (and its adapter, device and precision), or random
/// weights of a shape.
#[derive(Args, Clone)]
pub struct Subject {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Benchmark random weights of this shape instead of `--model`: a config.json path (Qwen2
    /// or Qwen2.5-VL), `qwen2.5-0.5b` (Qwen2.5-0.5B-Instruct's shape) or `qwen2.5-vl-3b`
    /// (Qwen2.5-VL-3B-Instruct's).
    #[arg(long)]
    pub config: Option<String>,
}

impl Subject {
    /// What the figures are of: the shape, else the model.
    pub fn name(&self) -> String {
        self.config.clone().unwrap_or_else(|| self.model.model.to_string())
    }
}

/// `--device` of the benches whose figures are compared run to run: the CPU unless told.
#[derive(Args, Clone, Copy)]
pub struct CpuByDefault {
    /// `cpu`, `cuda`, `cuda:N` or `auto` (a GPU when libtorch sees one).
    #[arg(long, default_value = "cpu")]
    pub device: DeviceChoice,
}

/// The training config whose RL steps a bench times, each run a `train` of its own.
#[derive(Args, Clone)]
pub struct TimedConfig {
    /// The training config whose RL steps are timed.
    #[arg(long, default_value = "examples/frozenlake-cpu.toml")]
    pub config: PathBuf,
    /// Extra `--set KEY=VALUE` for the runs (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
}

/// `--json`: the figures also as one JSON line at the end.
#[derive(Args, Clone, Copy)]
pub struct JsonOutput {
    /// End with one JSON line holding the figures, for scripts (the GPU bundle's report).
    #[arg(long)]
    pub json: bool,
}
