//! `vagen-host`: load environment plugins, inspect them, run episodes, benchmark them;
//! run language models.

mod bench;
mod bench_model;
mod bench_reward;
mod bench_rollout;
mod check;
mod eval;
mod fuzz;
mod generate;
mod inspect;
mod limits_arg;
mod model_args;
mod parity_dump;
mod policy;
mod record;
mod reward_tools;
mod run;
mod run_output;
mod sdk_tools;
mod serve;
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
    run: Option<run::RunArgs>,
}

#[derive(Subcommand)]
enum Command {
    /// Show a plugin's manifest, WIT version, size, sha256 and imports.
    Inspect(inspect::InspectArgs),
    /// Run episodes with a random, oracle or human policy.
    Run(run::RunArgs),
    /// Check that a plugin honours the contract (determinism, protocol, oracle).
    Check(check::CheckArgs),
    /// Shake a plugin with adversarial episodes; save a reproducer per finding.
    Fuzz(fuzz::FuzzArgs),
    /// Measure load, instantiate, reset and step costs of plugins (prints figures).
    Bench(bench::BenchArgs),
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
    /// Our outputs (logits, greedy ids, log-probs) on the cases a parity reference wrote
    /// (`host/model/reference/parity_sweep.py`), for it to compare with transformers'.
    ParityDump(parity_dump::ParityDumpArgs),
    /// Serve a model (ours or a checkpoint) over an OpenAI-compatible HTTP API
    /// (`/v1/chat/completions`, streaming included), batching concurrent requests.
    Serve(serve::ServeArgs),
    /// Train a model on an env plugin: SFT warm start, then PPO/GRPO (the main job).
    Train(train::TrainArgs),
    /// Only the supervised warm start of a training config, then a held-out evaluation.
    Sft(train::TrainArgs),
    /// Held-out success of a model (a checkpoint's `actor/` folder, or `default`) on a plugin.
    Eval(eval::EvalArgs),
    /// For C (or any language compiling to a core module): write the C bindings of the env
    /// contract (`environment.h`, `environment.c`, `environment_component_type.o`).
    CBindings(sdk_tools::CBindingsArgs),
    /// Wrap a core WebAssembly module (built with the C bindings) into an env component,
    /// adapting WASI preview 1 to preview 2.
    Componentize(sdk_tools::ComponentizeArgs),
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("VAGEN_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    vagen_model::install_panic_hook();
    if let Err(e) = dispatch(Cli::parse()) {
        if let Some(exit) = e.downcast_ref::<Exit>() {
            eprintln!("{}", exit.message);
            std::process::exit(exit.code);
        }
        // One line that names the problem; causes joined with ": ".
        eprintln!("error: {}", vagen_model::without_cpp_backtrace(&format!("{e:#}")));
        std::process::exit(1);
    }
}

/// An outcome that is not an error but must not exit 0 either, with its own status (see
/// "Guarantees" in docs/architecture.md).
#[derive(Debug)]
pub struct Exit {
    pub code: i32,
    pub message: String,
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Exit {}

fn dispatch(cli: Cli) -> Result<()> {
    match (cli.command, cli.run) {
        (Some(Command::Inspect(a)), _) => inspect::inspect(a),
        (Some(Command::Run(a)), _) | (None, Some(a)) => run::run(a),
        (Some(Command::Check(a)), _) => check::check(a),
        (Some(Command::Fuzz(a)), _) => fuzz::fuzz(a),
        (Some(Command::Bench(a)), _) => bench::bench(a),
        (Some(Command::Generate(a)), _) => generate::generate(a),
        (Some(Command::BenchModel(a)), _) => bench_model::bench_model(a),
        (Some(Command::BenchRollout(a)), _) => bench_rollout::bench_rollout(a),
        (Some(Command::Serve(a)), _) => serve::serve(a),
        (Some(Command::ParityDump(a)), _) => parity_dump::parity_dump(a),
        (Some(Command::BenchReward(a)), _) => bench_reward::bench_reward(a),
        (Some(Command::Train(a)), _) => train::train(a),
        (Some(Command::Sft(a)), _) => train::sft(a),
        (Some(Command::Eval(a)), _) => eval::eval(a),
        (Some(Command::CBindings(a)), _) => sdk_tools::c_bindings(a),
        (Some(Command::Componentize(a)), _) => sdk_tools::componentize(a),
        (None, None) => {
            use clap::CommandFactory;
            Cli::command().print_help()?;
            Ok(())
        }
    }
}
