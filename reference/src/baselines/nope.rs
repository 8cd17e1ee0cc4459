//! NoPE: no positional encoding; as an additive bias, zero everywhere.

use nalgebra::DVector;

use crate::bias::{AdditiveBias, Pair};
use crate::error::{Error, Result};

/// NoPE: `b_h(i, j) = 0`. spec: [nope.bias]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nope {
    /// H ≥ 1.
    pub heads: usize,
}

impl AdditiveBias for Nope {
    fn heads(&self) -> usize {
        self.heads
    }

    /// spec: [nope.bias], [num.errors]
    fn validate(&self) -> Result<()> {
        if self.heads == 0 {
            return Err(Error::Empty {
                what: "NoPE heads".into(),
            });
        }
        Ok(())
    }

    /// spec: [nope.bias]
    fn bias(&self, _pair: Pair) -> DVector<f64> {
        DVector::zeros(self.heads)
    }
}
