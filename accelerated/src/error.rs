//! The crate's error type: every failure a caller can cause is a typed, explained error.

use std::path::PathBuf;

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
    /// A checkpoint file is missing, unreadable, or differs from what the checkpoint's manifest
    /// recorded when it was written. Carries the checkpoint a caller can fall back to.
    #[error("checkpoint {}: {file} {reason}; {fallback}", checkpoint.display())]
    Corrupt {
        /// The checkpoint directory.
        checkpoint: PathBuf,
        /// The file at fault, relative to the checkpoint.
        file: String,
        /// What is wrong with it.
        reason: String,
        /// The newest other checkpoint of the same run that can be used instead.
        fallback: Fallback,
    },
    /// Writing a checkpoint failed; what the run had saved before (the previous checkpoint,
    /// `latest`) is untouched and no partial checkpoint is left behind.
    #[error("saving checkpoint {checkpoint} failed: {}: {error}; {kept}", path.display())]
    Save {
        /// The checkpoint being written (`step-NNNNNNN`).
        checkpoint: String,
        /// The file or directory whose write failed.
        path: PathBuf,
        /// The OS error (not a `source`: the message already says it, and a chained source
        /// would print it twice).
        error: std::io::Error,
        /// What is still on disk (the previous checkpoint, or that there is none).
        kept: String,
    },
    /// Training produced a non-finite loss, gradient norm or parameter; nothing non-finite
    /// was saved.
    #[error("diverged at step {step} ({what}); {}; try a lower learning rate", last_good_words(.last_good))]
    Diverged {
        /// The step (1-based, as in `metrics.jsonl`) whose values were not finite.
        step: u64,
        /// `loss NaN / grad-norm inf` and, where a parameter went bad, which one.
        what: String,
        /// The newest checkpoint saved (`step-NNNNNNN`), if any.
        last_good: Option<String>,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {error}")]
    Io {
        /// The file.
        path: String,
        /// The OS error (not a `source`: the message already says it, and a chained source
        /// would print it twice).
        error: std::io::Error,
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

/// The checkpoint a caller can use instead of a corrupt one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fallback {
    /// An older checkpoint whose every file matches its manifest.
    Verified(PathBuf),
    /// No checkpoint verifies, but this one, written before checkpoints carried a manifest,
    /// reads back (its integrity cannot be checked).
    Unverified(PathBuf),
    /// Nothing to fall back to.
    None,
}

impl Fallback {
    /// The checkpoint directory, if there is one.
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            Self::Verified(p) | Self::Unverified(p) => Some(p),
            Self::None => None,
        }
    }
}

impl std::fmt::Display for Fallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Verified(p) => {
                write!(f, "the newest checkpoint that verifies is {}", p.display())
            }
            Self::Unverified(p) => write!(
                f,
                "no checkpoint of this run verifies; {} reads back but has no manifest to verify",
                p.display()
            ),
            Self::None => write!(f, "no other checkpoint of this run verifies"),
        }
    }
}

fn last_good_words(last: &Option<String>) -> String {
    match last {
        Some(name) => format!("last good checkpoint {name}"),
        None => "no checkpoint saved yet".into(),
    }
}

impl Error {
    /// Names a kernel's complaint about a parameter in the model's words: the encoding, the
    /// parameter's state-dict name and the layer (`None`: one module shared by every layer).
    pub fn in_module(self, encoding: &str, layer: Option<usize>) -> Self {
        match self {
            Self::Kernels(fire_kernels::Error::Parameter { name, reason }) => {
                let place = match layer {
                    Some(l) => format!("of layer {l}"),
                    None => "(shared by every layer)".into(),
                };
                let encoding = if encoding.starts_with("fire") {
                    encoding.to_uppercase()
                } else {
                    encoding.to_owned()
                };
                Self::Input(format!("{encoding} {name} {place}: {reason}"))
            }
            other => other,
        }
    }
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;

/// An [`Error::Io`] for `path`.
pub fn io(path: impl AsRef<std::path::Path>) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.as_ref().display().to_string();
    move |error| Error::Io { path, error }
}

/// An [`Error::Input`] unless `ok`.
pub fn ensure(ok: bool, message: impl FnOnce() -> String) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(Error::Input(message()))
    }
}
