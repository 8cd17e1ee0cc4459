//! Positions and the indexing conventions of the spec.
//!
//! Positions are 0-based integers, as in the paper's Appendix E code; the paper's 1-based
//! statement is a named variant reached by [`Indexing::OneBased`].

use crate::error::{Error, Result};

/// A token position (a non-negative integer) and the largest one accepted, 2^53, below which
/// every position converts to f64 exactly: words shared with the other implementations.
/// spec: [conv.positions]
pub use fire_vocabulary::{Position, MAX_POSITION};

/// How the integers handed to an encoding map to the paper's positions. spec: [conv.indexing]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Indexing {
    /// Appendix E: the first token is position 0. The normative convention.
    #[default]
    ZeroBased,
    /// The paper's prose (0 < j ≤ i): the first token is position 1, i.e. `p ↦ p + 1`.
    OneBased,
}

impl Indexing {
    /// The position the formulas see for the token at 0-based index `p`. spec: [conv.indexing]
    pub fn apply(self, p: Position) -> Position {
        match self {
            Indexing::ZeroBased => p,
            Indexing::OneBased => p + 1,
        }
    }
}

/// A position as the f64 the formulas compute with; exact by [`MAX_POSITION`].
/// spec: [conv.positions]
pub fn as_real(p: Position) -> f64 {
    p as f64
}

/// The signed relative distance `i − j` (query minus key), exact in f64. spec: [conv.distance]
pub fn distance(i: Position, j: Position) -> f64 {
    as_real(i) - as_real(j)
}

/// True when key `j` is visible to query `i` under the causal mask (`j ≤ i`). spec: [conv.causal]
pub fn is_causal(i: Position, j: Position) -> bool {
    j <= i
}

/// Checks a list of positions: non-empty and exactly representable. spec: [conv.positions]
pub fn validate(what: &str, positions: &[Position]) -> Result<()> {
    if positions.is_empty() {
        return Err(Error::Empty {
            what: what.to_owned(),
        });
    }
    match positions.iter().find(|&&p| p > MAX_POSITION) {
        Some(&p) => Err(Error::PositionTooLarge { position: p }),
        None => Ok(()),
    }
}

/// The context length implied by a set of positions: one more than the largest.
/// Only the named deviation "normalise by sequence length" uses it. spec: [conv.length]
pub fn context_length(queries: &[Position], keys: &[Position]) -> Position {
    queries
        .iter()
        .chain(keys)
        .copied()
        .max()
        .map_or(0, |p| p + 1)
}
