//! Kerple-log as FIRE: one hidden neuron per head with σ(z) = ln(1 + z).

use crate::baselines::KerpleLog;
use crate::bias::AdditiveBias;
use crate::error::Result;
use crate::fire::{Activation, Fire};
use crate::theorem_3_1::{fire_with, layer, mlp, threshold};

/// The FIRE parameters equal to `target` on `0 ≤ j ≤ i ≤ P(L0)`, bit for bit: hidden neuron
/// `h` computes `ln(1 + (r2_h·P)·x)`, output `h` takes `−r1_h` times it. spec: [thm31.kerple-log]
pub fn kerple_log(target: &KerpleLog, l0: u64) -> Result<Fire> {
    target.validate()?;
    let p = threshold(l0)?;
    let h = target.heads();
    let hidden_w: Vec<f64> = target.r2.iter().map(|&r2| r2 * p).collect();
    let hidden = layer(h, 1, &hidden_w, &vec![0.0; h]);
    let mut out_w = vec![0.0; h * h];
    for (n, &r1) in target.r1.iter().enumerate() {
        out_w[n * h + n] = -r1;
    }
    let output = layer(h, h, &out_w, &vec![0.0; h]);
    fire_with(mlp(vec![hidden, output], Activation::Log1p), l0)
}
