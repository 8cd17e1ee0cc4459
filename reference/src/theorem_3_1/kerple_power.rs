//! Kerple-power as FIRE: one hidden neuron with σ(z) = max(z, 0)^{r2}, per run of heads that
//! share the exponent r2 (one MLP has one activation, so one exponent).

use crate::baselines::KerplePower;
use crate::bias::AdditiveBias;
use crate::error::Result;
use crate::fire::{Activation, Fire};
use crate::theorem_3_1::{fire_with, layer, mlp, threshold, Construction};

/// The FIRE parameters equal to `target` on `0 ≤ j ≤ i ≤ P(L0)`, bit for bit: one module per
/// maximal run of consecutive heads with equal `r2` (a single module when all heads share it).
/// spec: [thm31.kerple-power], [thm31.heads]
pub fn kerple_power(target: &KerplePower, l0: u64) -> Result<Construction> {
    target.validate()?;
    let mut parts = Vec::new();
    let mut start = 0;
    while start < target.heads() {
        let r2 = target.r2[start];
        let end = start + target.r2[start..].iter().take_while(|&&e| e == r2).count();
        parts.push(run(&target.r1[start..end], r2, l0)?);
        start = end;
    }
    Ok(Construction { parts })
}

/// Heads sharing exponent `r2`: the neuron computes `(P·x)^{r2} = (i − j)^{r2}`, output `h`
/// takes `−r1_h` times it. spec: [thm31.kerple-power]
fn run(r1: &[f64], r2: f64, l0: u64) -> Result<Fire> {
    let p = threshold(l0)?;
    let hidden = layer(1, 1, &[p], &[0.0]);
    let out_w: Vec<f64> = r1.iter().map(|&a| -a).collect();
    let output = layer(r1.len(), 1, &out_w, &vec![0.0; r1.len()]);
    fire_with(mlp(vec![hidden, output], Activation::Power(r2)), l0)
}
