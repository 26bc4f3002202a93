//! vagen-env: the environment author's tool, without libtorch. `inspect`, `check`, `fuzz`,
//! `bench` and `run` (random, oracle, human and scripted policies, `--replay`) for env plugins
//! and reward components, and the SDK helpers (`c-bindings`, `componentize`). `vagen-host`
//! has the same commands (this crate's) beside its model commands, and gives `run` its
//! language model ([`policy::ModelPolicyMaker`]); its `bench` holds the model benchmarks
//! too, with this crate's [`bench`] as `bench env`.

pub mod bench;
pub mod check;
pub mod fuzz;
pub mod inspect;
pub mod limits_arg;
pub mod policy;
pub mod record;
pub mod reward_tools;
pub mod run;
pub mod run_output;
pub mod sdk_tools;
pub mod share;

use anyhow::Result;
use clap::Subcommand;

/// The env commands, as both binaries list them; `bench` ([`bench::BenchArgs`]) each lists
/// its own way (`vagen-env bench`, `vagen-host bench env`).
#[derive(Subcommand)]
pub enum EnvCommand {
    /// Show a plugin's manifest, WIT version, size, sha256 and imports.
    Inspect(inspect::InspectArgs),
    /// Run episodes with a random, oracle, human (or, in vagen-host, model) policy.
    Run(run::RunArgs),
    /// Check that a plugin honours the contract (determinism, protocol, oracle).
    Check(check::CheckArgs),
    /// Shake a plugin with adversarial episodes; save a reproducer per finding.
    Fuzz(fuzz::FuzzArgs),
    /// For C (or any language compiling to a core module): write the C bindings of the env
    /// contract (`environment.h`, `environment.c`, `environment_component_type.o`).
    CBindings(sdk_tools::CBindingsArgs),
    /// Wrap a core WebAssembly module (built with the C bindings) into an env component,
    /// adapting WASI preview 1 to preview 2.
    Componentize(sdk_tools::ComponentizeArgs),
    /// Push a component to an OCI registry (`oci://REGISTRY/REPO:TAG`), signed with
    /// --sign-key; prints the digest it is now pinned by.
    Push(share::PushArgs),
    /// Fetch an `oci://` component into the cache (verified; its signature checked with
    /// --verify-key), optionally copying it out.
    Pull(share::PullArgs),
    /// Make a cosign key pair for signing pushes (`cosign.key`, `cosign.pub`).
    Keygen(share::KeygenArgs),
    /// Write name, version, license and the rest into a component's standard metadata
    /// sections, from a package manifest (Cargo.toml, pyproject.toml, package.json) or flags.
    Metadata(share::MetadataArgs),
}

/// Runs one env command; `model` makes `run --policy model`'s policy.
pub fn dispatch(command: EnvCommand, model: &policy::ModelPolicyMaker) -> Result<()> {
    match command {
        EnvCommand::Inspect(a) => inspect::inspect(a),
        EnvCommand::Run(a) => run::run(a, model),
        EnvCommand::Check(a) => check::check(a),
        EnvCommand::Fuzz(a) => fuzz::fuzz(a),
        EnvCommand::CBindings(a) => sdk_tools::c_bindings(a),
        EnvCommand::Componentize(a) => sdk_tools::componentize(a),
        EnvCommand::Push(a) => share::push(a),
        EnvCommand::Pull(a) => share::pull(a),
        EnvCommand::Keygen(a) => share::keygen(a),
        EnvCommand::Metadata(a) => share::metadata(a),
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

/// Ends the process as a command's outcome says: an [`Exit`] with its status and message,
/// an error as one line naming the problem (causes joined with ": ", passed through `tidy`)
/// with status 1.
pub fn finish(outcome: Result<()>, tidy: fn(&str) -> &str) {
    if let Err(e) = outcome {
        if let Some(exit) = e.downcast_ref::<Exit>() {
            eprintln!("{}", exit.message);
            std::process::exit(exit.code);
        }
        eprintln!("error: {}", tidy(&format!("{e:#}")));
        std::process::exit(1);
    }
}

/// The running binary's name (`vagen-env` or `vagen-host`), for commands a message suggests.
pub fn program() -> String {
    let argv0 = std::env::args_os().next().unwrap_or_default();
    let name = std::path::Path::new(&argv0).file_name().map(|n| n.to_string_lossy().into_owned());
    name.filter(|n| n.starts_with("vagen-")).unwrap_or_else(|| "vagen-env".into())
}

/// Logs to stderr at `VAGEN_LOG`'s level (default `warn`).
pub fn init_logging() {
    tracing_subscriber::fmt()
        // sigstore warns of every signature location it finds empty (the referrers API most
        // registries lack); whether a component is signed is ours to say.
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("VAGEN_LOG").unwrap_or_else(|_| "warn,sigstore=error".into()),
        )
        .with_writer(std::io::stderr)
        .init();
}
