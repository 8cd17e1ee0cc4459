//! The crate's error type: every failure a caller can cause is a typed, explained error.

/// Errors of the accelerated model, its data and its checkpoints.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A tensor operation failed (shape mismatch, device error, …).
    #[error("tensor operation failed: {0}")]
    Candle(#[from] candle_core::Error),
    /// The kernels (compiled FIRE, the fused attention) rejected their inputs.
    #[error("{0}")]
    Kernels(#[from] fire_kernels::Error),
    /// The model or training configuration is not usable.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// Inputs (positions, parameters, tokens) do not satisfy their contract.
    #[error("invalid input: {0}")]
    Input(String),
    /// The corpus cannot serve the request (too short, empty split, …).
    #[error("data: {0}")]
    Data(String),
    /// A checkpoint is missing, incomplete or inconsistent.
    #[error("checkpoint {path}: {reason}")]
    Checkpoint {
        /// Where.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A JSON or YAML document did not parse.
    #[error("{path}: {reason}")]
    Parse {
        /// The file.
        path: String,
        /// The parser's message.
        reason: String,
    },
    /// Drawing a plot failed.
    #[error("plot {path}: {reason}")]
    Plot {
        /// The output file.
        path: String,
        /// The backend's message.
        reason: String,
    },
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;

/// An [`Error::Io`] for `path`.
pub fn io(path: impl AsRef<std::path::Path>) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.as_ref().display().to_string();
    move |source| Error::Io { path, source }
}

/// An [`Error::Input`] unless `ok`.
pub fn ensure(ok: bool, message: impl FnOnce() -> String) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(Error::Input(message()))
    }
}
