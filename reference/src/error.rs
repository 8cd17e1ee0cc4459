//! The one error type of the reference: every invalid input is a typed, explained error.
//!
//! spec: [num.errors]

use thiserror::Error;

/// Why the reference refused to evaluate.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum Error {
    /// A parameter is NaN or infinite.
    #[error("parameter `{name}` must be finite, got {value}")]
    NonFinite { name: String, value: f64 },
    /// A parameter is finite but outside the range its clause allows.
    #[error("parameter `{name}` = {value} is out of range: {requirement}")]
    OutOfRange {
        name: String,
        value: f64,
        requirement: String,
    },
    /// Two things that must agree in shape do not.
    #[error("shape mismatch in {what}: expected {expected}, got {got}")]
    Shape {
        what: String,
        expected: String,
        got: String,
    },
    /// A list that must hold at least one element is empty.
    #[error("{what} must not be empty")]
    Empty { what: String },
    /// A position too large to be represented exactly as an f64.
    #[error("position {position} exceeds 2^53, the largest position an f64 holds exactly")]
    PositionTooLarge { position: u64 },
    /// Any other violated requirement of a clause.
    #[error("invalid {what}: {reason}")]
    Invalid { what: String, reason: String },
}

/// The reference's result type.
pub type Result<T> = std::result::Result<T, Error>;

/// Fails unless `value` is finite. spec: [num.errors]
pub fn finite(name: &str, value: f64) -> Result<f64> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(Error::NonFinite {
            name: name.to_owned(),
            value,
        })
    }
}

/// Fails unless `value` is finite and satisfies `ok`, explained by `requirement`.
pub fn checked(name: &str, value: f64, ok: bool, requirement: &str) -> Result<f64> {
    finite(name, value)?;
    if ok {
        Ok(value)
    } else {
        Err(Error::OutOfRange {
            name: name.to_owned(),
            value,
            requirement: requirement.to_owned(),
        })
    }
}
