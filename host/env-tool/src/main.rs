//! `vagen-env`: build, check and play environment plugins with no libtorch on the machine.

use clap::{Parser, Subcommand};
use vagen_env::{EnvCommand, bench, dispatch, finish, init_logging, policy, run::RunArgs};

/// Inspect, check, fuzz, benchmark and play environment plugins and reward components.
///
/// With no subcommand, `vagen-env --plugin F ...` is `vagen-env run --plugin F ...`.
#[derive(Parser)]
#[command(name = "vagen-env", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: Option<RunArgs>,
    #[command(flatten)]
    trust: vagen_env::share::TrustArgs,
}

#[derive(Subcommand)]
enum Command {
    #[command(flatten)]
    Env(Box<EnvCommand>),
    /// Measure load, instantiate, reset and step costs of plugins (prints figures).
    Bench(bench::BenchArgs),
}

fn main() {
    init_logging();
    let cli = Cli::parse();
    cli.trust.clone().apply();
    let outcome = match (cli.command, cli.run) {
        (Some(Command::Env(c)), _) => dispatch(*c, &policy::no_model),
        (Some(Command::Bench(a)), _) => bench::bench(a),
        (None, Some(a)) => dispatch(EnvCommand::Run(a), &policy::no_model),
        (None, None) => {
            use clap::CommandFactory;
            Cli::command().print_help().map_err(Into::into)
        }
    };
    finish(outcome, |s| s);
}
