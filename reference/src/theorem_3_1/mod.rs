//! Theorem 3.1: FIRE can represent T5's RPE, Alibi, Kerple and Sandwich on a training length.
//!
//! spec: [thm31.statement], [thm31.exactness], [thm31.beyond], [thm31.future]
//!
//! Each function here builds, from a target encoding and a length `L0`, an explicit FIRE
//! parameter set whose bias equals the target's for every `0 ≤ j ≤ i < L0` — bit for bit for
//! T5, Alibi and Kerple, within a stated rounding bound for Sandwich (spec/theorem-3-1.md).
//! All constructions share one shape ([thm31.common]): ψ the identity, ε = 0, and the threshold
//! `L = P(L0)`, the smallest power of two `≥ L0`, so the MLP input is the exact dyadic
//! `x = (i − j)/P` and `P·x = i − j` exactly.

pub mod alibi;
pub mod kerple_log;
pub mod kerple_power;
pub mod sandwich;
pub mod t5;

pub use alibi::alibi;
pub use kerple_log::kerple_log;
pub use kerple_power::kerple_power;
pub use sandwich::{sandwich_centred, sandwich_paper};
pub use t5::{t5_buckets, t5_official, t5_simplified, t5_steps};

use nalgebra::{DMatrix, DVector};

use crate::bias::{AdditiveBias, Pair};
use crate::error::{Error, Result};
use crate::fire::{Activation, Fire, Linear, Mlp, Threshold, Transform};

/// The largest `L0` the constructions accept: `P(L0) ≤ 2^52` keeps every distance `< 2^53`.
/// spec: [thm31.common]
pub const MAX_L0: u64 = 1 << 52;

/// `P(L0)`: the smallest power of two `≥ L0`, the constructions' threshold. spec: [thm31.common]
pub fn threshold(l0: u64) -> Result<f64> {
    if l0 == 0 || l0 > MAX_L0 {
        return Err(Error::OutOfRange {
            name: "L0".into(),
            value: l0 as f64,
            requirement: format!("1 <= L0 <= 2^52 = {MAX_L0}"),
        });
    }
    Ok(l0.next_power_of_two() as f64)
}

/// A FIRE module around `mlp` with the common shape: ψ = identity, `L_init = P(L0)`, `m = 1`,
/// ε = 0 (c is unused by the identity ψ and set to 1). Validated before it is returned.
/// spec: [thm31.common]
pub fn fire_with(mlp: Mlp, l0: u64) -> Result<Fire> {
    let fire = Fire {
        mlp,
        c: 1.0,
        l_init: threshold(l0)?,
        l_multiplier: 1.0,
        eps: 0.0,
        transform: Transform::Identity,
        threshold: Threshold::Learnable,
    };
    fire.validate()?;
    Ok(fire)
}

/// A linear layer from a `[out, in]` weight given row by row and a bias.
pub(crate) fn layer(rows: usize, cols: usize, weight: &[f64], bias: &[f64]) -> Linear {
    Linear::new(
        DMatrix::from_row_slice(rows, cols, weight),
        DVector::from_column_slice(bias),
    )
}

/// An MLP of the given layers (hidden layers use `activation`), with no final activation.
pub(crate) fn mlp(layers: Vec<Linear>, activation: Activation) -> Mlp {
    Mlp {
        layers,
        activation,
        final_activation: None,
    }
}

/// Several FIRE modules side by side, their heads concatenated in order: the form a
/// construction takes when heads need different activations (one `Activation` per MLP).
/// spec: [thm31.heads]
#[derive(Debug, Clone, PartialEq)]
pub struct Construction {
    /// The modules; part `p` supplies the next `parts[p].heads()` heads.
    pub parts: Vec<Fire>,
}

impl Construction {
    /// The single module, when the construction needed only one.
    pub fn into_single(mut self) -> Option<Fire> {
        if self.parts.len() == 1 {
            self.parts.pop()
        } else {
            None
        }
    }
}

impl AdditiveBias for Construction {
    fn heads(&self) -> usize {
        self.parts.iter().map(AdditiveBias::heads).sum()
    }

    /// spec: [thm31.heads]
    fn validate(&self) -> Result<()> {
        if self.parts.is_empty() {
            return Err(Error::Empty {
                what: "construction parts".into(),
            });
        }
        self.parts.iter().try_for_each(AdditiveBias::validate)
    }

    /// spec: [thm31.heads]
    fn bias(&self, pair: Pair) -> DVector<f64> {
        let values: Vec<f64> = self
            .parts
            .iter()
            .flat_map(|p| p.bias(pair).iter().copied().collect::<Vec<_>>())
            .collect();
        DVector::from_vec(values)
    }
}
