//! Every way loading or calling a plugin can fail, as one typed enum.

use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    // `error`, not `source`: a source would be printed again by every error chain.
    #[error("cannot read {path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },

    #[error("{path} is not a WebAssembly file ({what})")]
    NotWasm { path: PathBuf, what: String },

    #[error("{path} is not a vagen plugin: {reason}")]
    NotAPlugin { path: PathBuf, reason: String },

    #[error("{path} speaks vagen:env@{found}, but this host supports vagen:env@{supported}")]
    WrongWitVersion { path: PathBuf, found: String, supported: String },

    #[error(
        "{path} is a native plugin for ABI version {found}, but this host supports ABI versions {supported}: rebuild it against this vagen-sdk"
    )]
    WrongAbiVersion { path: PathBuf, found: u32, supported: String },

    #[error(
        "{path} needs an import this host does not provide (plugins get no filesystem, network or other host APIs): {detail}"
    )]
    UnsupportedImport { path: PathBuf, detail: String },

    #[error("{path} could not be compiled: {detail}")]
    Compile { path: PathBuf, detail: String },

    #[error("bad config: {0}")]
    BadConfig(String),

    #[error("invalid state: {0}")]
    InvalidState(String),

    #[error("environment failed in {call}: {message}")]
    Failed { call: &'static str, message: String },

    /// An OpenEnv server failed the call: unreachable, timed out, closed, a server error
    /// or a malformed reply. A fault of the episode, like a trap.
    #[error("{call} failed at the OpenEnv server: {message}")]
    Remote { call: &'static str, message: String },

    #[error("{call} timed out after {limit:?}")]
    Timeout { call: &'static str, limit: Duration },

    #[error("{call} ran out of memory: it asked for {requested_mib} MiB, the cap is {cap_mib} MiB")]
    OutOfMemory { call: &'static str, requested_mib: u64, cap_mib: u64 },

    #[error(
        "{call} would take the plugin instances' memory together past {cap_mib} MiB (total_memory_mib); fewer instances or a smaller memory_mib fit"
    )]
    OutOfTotalMemory { call: &'static str, cap_mib: u64 },

    #[error("{call} ran out of fuel (budget {fuel} units)")]
    OutOfFuel { call: &'static str, fuel: u64 },

    #[error("{call} trapped: {message}{}", stderr_suffix(.stderr))]
    Trap { call: &'static str, message: String, stderr: String },

    #[error("{call} returned malformed data: {detail}")]
    Malformed { call: &'static str, detail: String },

    #[error(
        "{path} is a native plugin, which runs unsandboxed with your permissions, and it is named in {named_in}, a file that may come from someone else: pass --allow-native to trust it"
    )]
    NativeNotAllowed { path: PathBuf, named_in: PathBuf },

    #[error("bad reproducer: {0}")]
    BadReproducer(String),

    /// An `oci://` reference that could not be fetched, verified or trusted.
    #[error("{0}")]
    Registry(String),
}

/// The plugin's stderr on one line (errors are one line), shortened to its start.
fn stderr_suffix(stderr: &str) -> String {
    const MAX: usize = 400;
    // Kept whole in the error (it is capped at `output_bytes` when captured), escaped here.
    let lines: Vec<String> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && *l != "stack backtrace:")
        .map(crate::guest_text)
        .collect();
    if lines.is_empty() {
        return String::new();
    }
    let mut joined = lines.join(" | ");
    if joined.len() > MAX {
        let cut = (0..=MAX).rev().find(|&i| joined.is_char_boundary(i)).unwrap_or(0);
        joined.truncate(cut);
        joined.push('…');
    }
    format!(" (plugin stderr: {joined})")
}

impl Error {
    /// A fault of the instance itself (trap, timeout, resource breach): the instance is
    /// discarded and the episode counts as failed. Other errors leave it usable.
    pub fn is_fault(&self) -> bool {
        matches!(
            self,
            Error::Timeout { .. }
                | Error::OutOfMemory { .. }
                | Error::OutOfTotalMemory { .. }
                | Error::OutOfFuel { .. }
                | Error::Trap { .. }
                | Error::Malformed { .. }
                | Error::Remote { .. }
        )
    }

    /// A stable kebab-case name for metrics and reports.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Io { .. } => "io",
            Error::NotWasm { .. } => "not-wasm",
            Error::NotAPlugin { .. } => "not-a-plugin",
            Error::WrongWitVersion { .. } => "wrong-wit-version",
            Error::WrongAbiVersion { .. } => "wrong-abi-version",
            Error::UnsupportedImport { .. } => "unsupported-import",
            Error::Compile { .. } => "compile",
            Error::BadConfig(_) => "bad-config",
            Error::InvalidState(_) => "invalid-state",
            Error::Failed { .. } => "failed",
            Error::Remote { .. } => "remote",
            Error::Timeout { .. } => "timeout",
            Error::OutOfMemory { .. } => "out-of-memory",
            Error::OutOfTotalMemory { .. } => "out-of-total-memory",
            Error::OutOfFuel { .. } => "out-of-fuel",
            Error::Trap { .. } => "trap",
            Error::Malformed { .. } => "malformed",
            Error::BadReproducer(_) => "bad-reproducer",
            Error::NativeNotAllowed { .. } => "native-not-allowed",
            Error::Registry(_) => "registry",
        }
    }
}
