use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong loading, running or saving a model. Each variant names the file or
/// tensor at fault so a user can fix a broken checkpoint without reading our code.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    // Not `#[source]`: the message already includes the cause, and error chains would print
    // it twice.
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
    #[error("{path}: not a valid config: {message}")]
    Config { path: PathBuf, message: String },
    #[error("unsupported model: {0}")]
    Unsupported(String),
    #[error("checkpoint {path}: {message}")]
    Weights { path: PathBuf, message: String },
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("chat template: {0}")]
    Template(String),
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), error: source }
    }
}
