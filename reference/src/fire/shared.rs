//! FIRE-S: one FIRE module shared by every layer of the model.

use crate::bias::{evaluate, Bias};
use crate::error::{Error, Result};
use crate::fire::Fire;
use crate::positions::Position;

/// FIRE-S: a single module whose bias every layer adds. spec: [fire.shared]
#[derive(Debug, Clone, PartialEq)]
pub struct FireShared {
    /// The one module.
    pub module: Fire,
    /// The number of layers that share it.
    pub layers: usize,
}

impl FireShared {
    /// The bias of every layer, `[layers][H, Q, K]`: the same tensor `layers` times, computed once.
    /// spec: [fire.shared]
    pub fn evaluate(&self, queries: &[Position], keys: &[Position]) -> Result<Vec<Bias>> {
        if self.layers == 0 {
            return Err(Error::Empty {
                what: "FIRE-S layers".into(),
            });
        }
        let once = evaluate(&self.module, queries, keys)?;
        Ok(vec![once; self.layers])
    }
}

/// Per-layer FIRE: one independent module per layer. spec: [fire.per-layer]
pub fn per_layer(modules: &[Fire], queries: &[Position], keys: &[Position]) -> Result<Vec<Bias>> {
    if modules.is_empty() {
        return Err(Error::Empty {
            what: "FIRE layers".into(),
        });
    }
    modules.iter().map(|m| evaluate(m, queries, keys)).collect()
}
