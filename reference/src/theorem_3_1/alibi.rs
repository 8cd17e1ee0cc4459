//! Alibi as FIRE: a linear f_θ (no hidden layer), `f_h(x) = (−r_h·P)·x`.

use crate::baselines::Alibi;
use crate::bias::AdditiveBias;
use crate::error::Result;
use crate::fire::{Activation, Fire};
use crate::theorem_3_1::{fire_with, layer, mlp, threshold};

/// The FIRE parameters equal to `target` on `0 ≤ j ≤ i ≤ P(L0)`, bit for bit.
/// spec: [thm31.alibi]
pub fn alibi(target: &Alibi, l0: u64) -> Result<Fire> {
    target.validate()?;
    let p = threshold(l0)?;
    let heads = target.heads();
    let weight: Vec<f64> = target.slopes.iter().map(|&r| -r * p).collect();
    let output = layer(heads, 1, &weight, &vec![0.0; heads]);
    fire_with(mlp(vec![output], Activation::Identity), l0)
}
