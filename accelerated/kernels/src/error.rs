//! The one error type of the fast kernels: bad input is a typed, explained error, never a panic.

use thiserror::Error;

/// Why a fast kernel refused its input.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum Error {
    /// Two things that must agree in shape do not.
    #[error("shape mismatch in {what}: expected {expected}, got {got}")]
    Shape {
        what: String,
        expected: String,
        got: String,
    },
    /// A parameter is NaN, infinite or outside its allowed range.
    #[error("invalid parameter `{name}`: {reason}")]
    Parameter { name: String, reason: String },
    /// A list that must hold at least one element is empty.
    #[error("{what} must not be empty")]
    Empty { what: String },
    /// Any other violated requirement.
    #[error("invalid {what}: {reason}")]
    Invalid { what: String, reason: String },
}

/// The fast kernels' result type.
pub type Result<T> = std::result::Result<T, Error>;

/// A shape error from an expected and an actual count.
pub(crate) fn shape(what: &str, expected: impl ToString, got: impl ToString) -> Error {
    Error::Shape {
        what: what.into(),
        expected: expected.to_string(),
        got: got.to_string(),
    }
}

/// Fails unless `value` is finite.
pub(crate) fn finite(name: &str, value: f64) -> Result<f64> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(Error::Parameter {
            name: name.into(),
            reason: format!("must be finite, got {value}"),
        })
    }
}
