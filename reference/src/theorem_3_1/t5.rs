//! T5's RPE as FIRE, for every bucketing: a step layer that detects `i − j ≥ l_k`, then an
//! indicator layer that picks the one bucket, then the bucket values (two hidden layers,
//! Heaviside activation). [`t5_steps`] is the one-hidden-layer form (output weights are value
//! increments), which is exact in real arithmetic but only within rounding in floating point.

use crate::baselines::{T5Buckets, T5Official, T5Simplified};
use crate::bias::AdditiveBias;
use crate::error::Result;
use crate::fire::{Activation, Fire, Linear};
use crate::theorem_3_1::{fire_with, layer, mlp, threshold};

/// The boundaries that a distance `n ≤ P` can reach: `l_0 … l_{K'}` with `l_{K'} ≤ P`.
fn reachable(boundaries: &[u64], p: f64) -> &[u64] {
    let count = boundaries.iter().take_while(|&&l| (l as f64) <= p).count();
    &boundaries[..count]
}

/// Layer 1: neuron `k = 1..K'` computes `H(P·x − l_k) = [i − j ≥ l_k]`. spec: [thm31.t5]
fn step_layer(bounds: &[u64], p: f64) -> Linear {
    let k = bounds.len() - 1;
    let bias: Vec<f64> = bounds[1..].iter().map(|&l| -(l as f64)).collect();
    layer(k, 1, &vec![p; k], &bias)
}

/// A constant bias `r_{h,0}` (a single reachable bucket): a linear f_θ with weight 0.
fn constant(values: &[Vec<f64>], l0: u64) -> Result<Fire> {
    let h = values.len();
    let bias: Vec<f64> = values.iter().map(|row| row[0]).collect();
    fire_with(
        mlp(
            vec![layer(h, 1, &vec![0.0; h], &bias)],
            Activation::Heaviside,
        ),
        l0,
    )
}

/// The FIRE parameters equal to `target` on `0 ≤ j ≤ i ≤ P(L0)`, bit for bit.
/// spec: [thm31.t5]
pub fn t5_buckets(target: &T5Buckets, l0: u64) -> Result<Fire> {
    target.validate()?;
    let p = threshold(l0)?;
    let bounds = reachable(&target.boundaries, p);
    let k = bounds.len() - 1;
    if k == 0 {
        return constant(&target.values, l0);
    }
    // Layer 2: indicator t of bucket t = 0..K' is H(s_t − s_{t+1} − 1/2) with s_0 ≡ 1 and
    // s_{K'+1} ≡ 0; as a layer over s_1..s_{K'}: weight +1 on s_t (t ≥ 1), −1 on s_{t+1}
    // (t < K'), bias −1/2 + [t = 0].
    let mut w2 = vec![0.0; (k + 1) * k];
    let mut b2 = vec![-0.5; k + 1];
    b2[0] = 0.5;
    for t in 0..=k {
        if t >= 1 {
            w2[t * k + (t - 1)] = 1.0;
        }
        if t < k {
            w2[t * k + t] = -1.0;
        }
    }
    let h = target.heads();
    let out_w: Vec<f64> = target
        .values
        .iter()
        .flat_map(|row| row[..=k].iter().copied())
        .collect();
    let layers = vec![
        step_layer(bounds, p),
        layer(k + 1, k, &w2, &b2),
        layer(h, k + 1, &out_w, &vec![0.0; h]),
    ];
    fire_with(mlp(layers, Activation::Heaviside), l0)
}

/// The simplified form through its general form (`l_k = k`). spec: [thm31.t5]
pub fn t5_simplified(target: &T5Simplified, l0: u64) -> Result<Fire> {
    target.validate()?;
    // Only distances ≤ P(L0) matter: cap the bucket list there before materialising it.
    let p = threshold(l0)? as u64;
    let cap = target.cap.min(p);
    let truncated = T5Simplified {
        cap,
        values: target
            .values
            .iter()
            .map(|row| row[..=cap as usize].to_vec())
            .collect(),
    };
    t5_buckets(&truncated.as_buckets(), l0)
}

/// The official bucketing through its derived boundaries; equal on the causal domain.
/// spec: [thm31.t5]
pub fn t5_official(target: &T5Official, l0: u64) -> Result<Fire> {
    t5_buckets(&target.as_buckets()?, l0)
}

/// The one-hidden-layer form: the step layer, output weights `r_{h,k} − r_{h,k−1}` and output
/// bias `r_{h,0}`. Exact in real arithmetic; in f64 within the bound of [thm31.t5.steps].
/// spec: [thm31.t5.steps]
pub fn t5_steps(target: &T5Buckets, l0: u64) -> Result<Fire> {
    target.validate()?;
    let p = threshold(l0)?;
    let bounds = reachable(&target.boundaries, p);
    let k = bounds.len() - 1;
    if k == 0 {
        return constant(&target.values, l0);
    }
    let h = target.heads();
    let out_w: Vec<f64> = target
        .values
        .iter()
        .flat_map(|row| (1..=k).map(move |t| row[t] - row[t - 1]))
        .collect();
    let out_b: Vec<f64> = target.values.iter().map(|row| row[0]).collect();
    let layers = vec![step_layer(bounds, p), layer(h, k, &out_w, &out_b)];
    fire_with(mlp(layers, Activation::Heaviside), l0)
}
