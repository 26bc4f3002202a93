//! `vagen-host`: load environment plugins, inspect them, run episodes, benchmark them;
//! run language models.

mod bench;
mod bench_async;
mod bench_dp;
mod bench_harness;
mod bench_model;
mod bench_reward;
mod bench_rollout;
mod bench_train;
mod dist_check;
mod eval;
mod generate;
mod launch;
mod lock;
mod merge_lora;
mod model_args;
mod model_policy;
mod parity_dump;
mod seeds;
mod serve;
mod serve_env;
mod train;

use anyhow::Result;
use bench::Bench;
use clap::{Parser, Subcommand};

/// Train and evaluate agents on sandboxed environment plugins.
///
/// With no subcommand, `vagen-host --plugin F ...` is `vagen-host run --plugin F ...`.
#[derive(Parser)]
#[command(name = "vagen-host", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: Option<vagen_env::run::RunArgs>,
    #[command(flatten)]
    trust: vagen_env::share::TrustArgs,
}

#[derive(Subcommand)]
enum Command {
    #[command(flatten)]
    Env(vagen_env::EnvCommand),
    /// Benchmarks (print figures): `model`, `rollout`, `reward`, `train`, `dp`, `async`,
    /// `env`.
    Bench(bench::BenchArgs),
    /// Continue a prompt with a language model (a HF folder or the embedded default).
    Generate(generate::GenerateArgs),
    /// Check the data-parallel collectives (gloo, NCCL) on this machine or across the
    /// launcher's ranks: each checked against its definition, and the all-reduce's bandwidth.
    DistCheck(dist_check::DistCheckArgs),
    /// Our outputs (logits, greedy ids, log-probs) on the cases a parity reference wrote
    /// (`host/model/reference/parity_sweep.py`), for it to compare with transformers'.
    ParityDump(parity_dump::ParityDumpArgs),
    /// Serve a model (ours or a checkpoint) over an OpenAI-compatible HTTP API
    /// (`/v1/chat/completions`, streaming included), batching concurrent requests.
    Serve(serve::ServeArgs),
    /// Serve an env plugin as an OpenEnv environment server (openenv-core's WebSocket
    /// sessions and HTTP routes), a sandboxed instance per client.
    ServeEnv(serve_env::ServeEnvArgs),
    /// Train a model on an env plugin: SFT warm start, then PPO/GRPO (the main job).
    Train(train::TrainArgs),
    /// Only the supervised warm start of a training config, then a held-out evaluation.
    Sft(train::TrainArgs),
    /// A policy on held-out seeds of a plugin: a local model, any OpenAI-compatible endpoint,
    /// random or the oracle; n samples, pass@k, results, resume.
    Eval(eval::EvalArgs),
    /// Several `eval --out` folders' figures in one table (refused across env builds or
    /// settings unless told).
    EvalCompare(eval::compare::CompareArgs),
    /// Write `vagen.lock` beside a training config: every `oci://` component it names pinned
    /// to its digest now (a config with a lock beside it uses the locked digests).
    Lock(lock::LockArgs),
    /// Merge a LoRA adapter into its base and save the whole checkpoint.
    MergeLora(merge_lora::MergeLoraArgs),
    /// `bench model`'s old name, kept (hidden) for one release.
    #[command(hide = true)]
    BenchModel(bench_model::BenchModelArgs),
    /// `bench rollout`'s old name, kept (hidden) for one release.
    #[command(hide = true)]
    BenchRollout(bench_rollout::BenchRolloutArgs),
    /// `bench reward`'s old name, kept (hidden) for one release.
    #[command(hide = true)]
    BenchReward(bench_reward::BenchRewardArgs),
    /// `bench train`'s old name, kept (hidden) for one release.
    #[command(hide = true)]
    BenchTrain(bench_train::BenchTrainArgs),
    /// `bench dp`'s old name, kept (hidden) for one release.
    #[command(hide = true)]
    BenchDp(bench_dp::BenchDpArgs),
    /// `bench async`'s old name, kept (hidden) for one release.
    #[command(hide = true)]
    BenchAsync(bench_async::BenchAsyncArgs),
}

fn main() {
    vagen_env::init_logging();
    vagen_model::install_panic_hook();
    vagen_env::finish(dispatch(Cli::parse()), vagen_model::without_cpp_backtrace);
}

fn dispatch(cli: Cli) -> Result<()> {
    cli.trust.clone().apply();
    match (cli.command, cli.run) {
        (Some(Command::Env(c)), _) => vagen_env::dispatch(c, &model_policy::make),
        (None, Some(a)) => vagen_env::dispatch(vagen_env::EnvCommand::Run(a), &model_policy::make),
        (Some(Command::Generate(a)), _) => generate::generate(a),
        (Some(Command::Bench(a)), _) => bench::bench(a),
        (Some(Command::Serve(a)), _) => serve::serve(a),
        (Some(Command::ServeEnv(a)), _) => serve_env::serve_env(a),
        (Some(Command::ParityDump(a)), _) => parity_dump::parity_dump(a),
        (Some(Command::DistCheck(a)), _) => dist_check::dist_check(a),
        (Some(Command::Train(a)), _) => train::train(a),
        (Some(Command::Sft(a)), _) => train::sft(a),
        (Some(Command::Eval(a)), _) => eval::eval(a),
        (Some(Command::EvalCompare(a)), _) => eval::compare::compare(a),
        (Some(Command::MergeLora(a)), _) => merge_lora::merge_lora(a),
        (Some(Command::Lock(a)), _) => lock::lock(a),
        (Some(Command::BenchModel(a)), _) => Bench::Model(a).run(),
        (Some(Command::BenchRollout(a)), _) => Bench::Rollout(a).run(),
        (Some(Command::BenchReward(a)), _) => Bench::Reward(a).run(),
        (Some(Command::BenchTrain(a)), _) => Bench::Train(a).run(),
        (Some(Command::BenchDp(a)), _) => Bench::Dp(a).run(),
        (Some(Command::BenchAsync(a)), _) => Bench::Async(a).run(),
        (None, None) => {
            use clap::CommandFactory;
            Cli::command().print_help()?;
            Ok(())
        }
    }
}
