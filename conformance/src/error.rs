//! The harness's typed errors: what a library caller can tell apart without parsing messages.

use std::path::PathBuf;

use crate::vectors::load::LoadError;

/// Why the harness could not do what it was asked: produce a report, generate or copy the
/// suite, serve an implementation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The caller asked for something that cannot be done: an unknown dtype, a bad glob.
    #[error("{0}")]
    Usage(String),
    /// The implementation could not start or did not complete the handshake.
    #[error("the implementation failed its handshake: {0}")]
    Handshake(String),
    /// The suite could not be read.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The reference refused an input while generating or diagnosing.
    #[error(transparent)]
    Reference(#[from] fire_reference::Error),
    /// A file or folder could not be read or written.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The OS error (not a `source`: the message already says it, and a chained source
        /// would print it twice).
        error: std::io::Error,
    },
    /// The generator's own consistency check refused a drafted case: an invalid draft the
    /// reference accepts, a valid one it rejects, a T5 distance with more than two candidate
    /// buckets. spec: [vec.generation], [vec.invalid]
    #[error("{case}: {reason}")]
    Draft {
        /// The case id.
        case: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `generate --check`: the committed vectors differ from what the generator writes now.
    /// spec: [vec.generation]
    #[error(
        "the committed vectors drifted from the generator; run `fire-conformance generate`:\n  {}",
        .0.join("\n  ")
    )]
    Drift(Vec<String>),
    /// A results file (`check --results`) has a line that is not a well-formed reply, or a
    /// second reply for one case. spec: [proto.results]
    #[error("line {line}: {reason}")]
    Results {
        /// The line number, from 1.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// `serve`: the harness on the other end broke the protocol. spec: [proto.framing], [proto.request]
    #[error("the harness broke the protocol: {0}")]
    Protocol(String),
}

impl Error {
    /// An [`Error::Io`] for `path`.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |error| Self::Io { path, error }
    }
}

/// The harness's result type.
pub type Result<T> = std::result::Result<T, Error>;
