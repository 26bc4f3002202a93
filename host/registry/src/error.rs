use std::path::PathBuf;

/// What went wrong, naming the reference, registry or file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{reference}: not a registry reference: {why}")]
    Reference { reference: String, why: String },
    #[error("cannot reach the registry {registry}: {why}")]
    Unreachable { registry: String, why: String },
    #[error(
        "the registry {registry} refused the credentials ({why}): log in with `docker login {registry}`, or give --username with the password on stdin"
    )]
    Unauthorized { registry: String, why: String },
    #[error("{reference}: not in the registry ({why})")]
    NotFound { reference: String, why: String },
    #[error("{reference}: {why}")]
    Registry { reference: String, why: String },
    #[error("{reference}: not a Wasm component artifact: {why}")]
    NotAComponent { reference: String, why: String },
    #[error("{reference}: refused: {what} has {got}, not the {expected} it was asked for (tampered with or corrupted)")]
    Digest { reference: String, what: String, expected: String, got: String },
    #[error("{reference}: signature refused: {why}")]
    Signature { reference: String, why: String },
    #[error("{path}: {why}")]
    File { path: PathBuf, why: String },
    #[error("{0}")]
    Other(String),
}

impl Error {
    pub(crate) fn file(path: &std::path::Path, why: impl std::fmt::Display) -> Self {
        Error::File { path: path.into(), why: why.to_string() }
    }
}
