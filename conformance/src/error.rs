//! The harness's typed errors: what a library caller can tell apart without parsing messages.

use crate::vectors::load::LoadError;

/// Why the harness could not produce a report.
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
}

/// The harness's result type.
pub type Result<T> = std::result::Result<T, Error>;
