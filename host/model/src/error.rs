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
    /// A file of a model folder refused before it was read: outside the folder, not a
    /// regular file, or over its kind's cap.
    #[error("{path}: {message}")]
    Bounds { path: PathBuf, message: String },
    #[error("checkpoint {path}: {message}")]
    Weights { path: PathBuf, message: String },
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("chat template: {0}")]
    Template(String),
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// The engine's hook for new weights failed ([`crate::Engine::set_refresh`]).
    #[error("loading new weights: {0}")]
    Refresh(String),
    /// A panic caught where a whole operation could be refused (see `catch_panic`).
    #[error("internal failure: {0}")]
    Panic(String),
    /// libtorch's message, without the C++ backtrace it carries.
    #[error("libtorch: {0}")]
    Torch(String),
}

impl From<tch::TchError> for Error {
    fn from(e: tch::TchError) -> Self {
        Error::Torch(without_cpp_backtrace(&e.to_string()).to_string())
    }
}

/// libtorch's error text up to the backtrace it appends ("Exception raised from … frame
/// #0: …", thirty-odd lines of C++ frames a user cannot act on). Also on a message quoted
/// with `{:?}` (a panic's `unwrap`), where the line breaks are escaped.
pub fn without_cpp_backtrace(message: &str) -> &str {
    let end = message.find("Exception raised from").unwrap_or(message.len());
    let mut kept = message[..end].trim_end();
    while let Some(rest) = kept.strip_suffix("\\n") {
        kept = rest.trim_end();
    }
    kept
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), error: source }
    }
}

/// Runs a call into one of the C++ shims (`cpp/`), which return 0 or write their error's
/// text into the buffer they are given: that text's first line becomes an [`Error`] named by
/// `what` (built only on failure).
pub(crate) fn shim_call(
    what: impl FnOnce() -> String,
    f: impl FnOnce(*mut std::ffi::c_char, usize) -> std::ffi::c_int,
) -> Result<()> {
    let mut err = [0 as std::ffi::c_char; 1024];
    if f(err.as_mut_ptr(), err.len()) == 0 {
        return Ok(());
    }
    // SAFETY: the shim wrote a NUL-terminated string within the buffer.
    let text = unsafe { std::ffi::CStr::from_ptr(err.as_ptr()) }.to_string_lossy();
    Err(Error::Invalid(format!("{}: {}", what(), text.lines().next().unwrap_or(""))))
}
