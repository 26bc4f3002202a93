//! `vagen-host`: load environment plugins, inspect them, run episodes, benchmark them;
//! run language models.

mod bench_async;
mod bench_dp;
mod bench_model;
mod bench_reward;
mod bench_rollout;
mod bench_train;
mod dist_check;
mod eval;
mod generate;
mod launch;
mod merge_lora;
mod model_args;
mod model_policy;
mod parity_dump;
mod serve;
mod serve_env;
mod train;

use anyhow::Result;
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
}

#[derive(Subcommand)]
enum Command {
    #[command(flatten)]
    Env(vagen_env::EnvCommand),
    /// Continue a prompt with a language model (a HF folder or the embedded default).
    Generate(generate::GenerateArgs),
    /// Measure generation throughput (prefill and decode tokens/s), optionally next to
    /// transformers on the same shape (prints figures).
    BenchModel(bench_model::BenchModelArgs),
    /// Time a multi-turn rollout workload (groups x members x turns, growing history) on
    /// the static engine, the continuous engine and transformers' `generate` (prints figures).
    BenchRollout(bench_rollout::BenchRolloutArgs),
    /// What a reward component costs per turn, and judge throughput locally and through
    /// `serve` (prints figures).
    BenchReward(bench_reward::BenchRewardArgs),
    /// What an update step costs, full-parameter against LoRA ranks: tokens/s, trainable
    /// parameters, optimiser state, peak memory (prints figures).
    BenchTrain(bench_train::BenchTrainArgs),
    /// Data-parallel scaling: RL steps at each world size, and ZeRO-1's optimiser state per
    /// rank on a model shape (prints figures).
    BenchDp(bench_dp::BenchDpArgs),
    /// RL steps per minute at each `[async] max_staleness`, and where the time goes (prints
    /// figures).
    BenchAsync(bench_async::BenchAsyncArgs),
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
    /// Held-out success of a model (a checkpoint's `actor/` folder, or `default`) on a plugin.
    Eval(eval::EvalArgs),
    /// Merge a LoRA adapter into its base and save the whole checkpoint.
    MergeLora(merge_lora::MergeLoraArgs),
}

fn main() {
    vagen_env::init_logging();
    vagen_model::install_panic_hook();
    vagen_env::finish(dispatch(Cli::parse()), vagen_model::without_cpp_backtrace);
}

fn dispatch(cli: Cli) -> Result<()> {
    match (cli.command, cli.run) {
        (Some(Command::Env(c)), _) => vagen_env::dispatch(c, &model_policy::make),
        (None, Some(a)) => vagen_env::dispatch(vagen_env::EnvCommand::Run(a), &model_policy::make),
        (Some(Command::Generate(a)), _) => generate::generate(a),
        (Some(Command::BenchModel(a)), _) => bench_model::bench_model(a),
        (Some(Command::BenchRollout(a)), _) => bench_rollout::bench_rollout(a),
        (Some(Command::Serve(a)), _) => serve::serve(a),
        (Some(Command::ServeEnv(a)), _) => serve_env::serve_env(a),
        (Some(Command::ParityDump(a)), _) => parity_dump::parity_dump(a),
        (Some(Command::BenchReward(a)), _) => bench_reward::bench_reward(a),
        (Some(Command::BenchTrain(a)), _) => bench_train::bench_train(a),
        (Some(Command::BenchDp(a)), _) => bench_dp::bench_dp(a),
        (Some(Command::BenchAsync(a)), _) => bench_async::bench_async(a),
        (Some(Command::DistCheck(a)), _) => dist_check::dist_check(a),
        (Some(Command::Train(a)), _) => train::train(a),
        (Some(Command::Sft(a)), _) => train::sft(a),
        (Some(Command::Eval(a)), _) => eval::eval(a),
        (Some(Command::MergeLora(a)), _) => merge_lora::merge_lora(a),
        (None, None) => {
            use clap::CommandFactory;
            Cli::command().print_help()?;
            Ok(())
        }
    }
}
