//! Sandwich as FIRE: one hidden layer of cosine neurons, one per frequency, shared by all heads.

use crate::baselines::sandwich::frequency;
use crate::baselines::{SandwichCentred, SandwichPaper};
use crate::bias::AdditiveBias;
use crate::error::Result;
use crate::fire::{Activation, Fire};
use crate::theorem_3_1::{fire_with, layer, mlp, threshold};

/// The paper's form: neuron `k` computes `cos((P·ω_k)·x) = cos((i − j)·ω_k)`, output `h` weighs
/// every neuron by `r1_h`. Equal to `target` on `0 ≤ j ≤ i ≤ P(L0)` up to the rounding of a
/// sum of `r2` terms. spec: [thm31.sandwich]
pub fn sandwich_paper(target: &SandwichPaper, l0: u64) -> Result<Fire> {
    target.validate()?;
    let p = threshold(l0)?;
    let m = target.r2 as usize;
    let hidden_w: Vec<f64> = (1..=target.r2)
        .map(|k| p * frequency(k, target.dim))
        .collect();
    let hidden = layer(m, 1, &hidden_w, &vec![0.0; m]);
    let out_w: Vec<f64> = target
        .r1
        .iter()
        .flat_map(|&r| std::iter::repeat_n(r, m))
        .collect();
    let output = layer(target.heads(), m, &out_w, &vec![0.0; target.heads()]);
    fire_with(mlp(vec![hidden, output], Activation::Cos), l0)
}

/// The centred form: the same cosine neurons (frequencies `10000^(−2k/d)`, `k = 1..d/2`),
/// output `h` weighs each by `1/(8h/H)` and adds `−(d/2)/(8h/H)`. spec: [thm31.sandwich-centred]
pub fn sandwich_centred(target: &SandwichCentred, l0: u64) -> Result<Fire> {
    target.validate()?;
    let p = threshold(l0)?;
    let d = f64::from(target.head_dim);
    let m = (target.head_dim / 2) as usize;
    let hidden_w: Vec<f64> = (1..=target.head_dim / 2)
        .map(|k| p * frequency(2 * k, d))
        .collect();
    let hidden = layer(m, 1, &hidden_w, &vec![0.0; m]);
    let heads = target.heads();
    let out_w: Vec<f64> = (1..=heads)
        .flat_map(|h| std::iter::repeat_n(1.0 / target.scale(h), m))
        .collect();
    let out_b: Vec<f64> = (1..=heads)
        .map(|h| -target.shift() / target.scale(h))
        .collect();
    let output = layer(heads, m, &out_w, &out_b);
    fire_with(mlp(vec![hidden, output], Activation::Cos), l0)
}
