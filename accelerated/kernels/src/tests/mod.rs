//! Every fast path against its slow twin and against `fire_reference`.

mod aligned;
mod attention;
mod backward;
mod bias;
mod compile;
mod device;
mod gemm;

use fire_reference::fire::init::{appendix_e, Shape as InitShape};

use fire_vocabulary::{Activation, SplitMix64, Threshold, Transform};

use crate::fire::FireParams;
use crate::mlp::{Linear, Mlp};

/// Our plain MLP from the reference's nalgebra one.
pub(super) fn mlp_from_reference(m: &fire_reference::fire::Mlp) -> Mlp {
    let layers = m
        .layers
        .iter()
        .map(|l| {
            let (rows, cols) = l.weight.shape();
            let w = (0..rows)
                .flat_map(|o| (0..cols).map(move |i| (o, i)))
                .map(|(o, i)| l.weight[(o, i)])
                .collect();
            Linear::new(w, l.bias.iter().copied().collect(), cols, rows).unwrap()
        })
        .collect();
    let act = |a: fire_reference::fire::Activation| {
        Activation::parse(&a.name()).unwrap_or_else(|| panic!("unsupported activation {a:?}"))
    };
    Mlp::new(layers, act(m.activation), m.final_activation.map(act)).unwrap()
}

/// A reference FIRE module (Appendix E init) with our copy of it. `l_multiplier` scales the
/// threshold so tests cross it at small positions.
pub(super) fn fire_pair(
    heads: usize,
    width: usize,
    depth: usize,
    seed: u64,
    l_multiplier: f64,
) -> (fire_reference::Fire, Mlp, FireParams) {
    let mut f = appendix_e(
        InitShape {
            heads,
            width,
            depth,
        },
        seed,
    );
    f.l_multiplier = l_multiplier;
    let params = FireParams {
        c: f.c,
        l_init: f.l_init,
        l_multiplier: f.l_multiplier,
        eps: f.eps,
        transform: Transform::Log,
        threshold: Threshold::Learnable,
    };
    let mlp = mlp_from_reference(&f.mlp);
    (f, mlp, params)
}

/// `n` values uniform in [−1, 1).
pub(super) fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| rng.uniform(-1.0, 1.0) as f32).collect()
}

/// Random `q`, `k`, `v` and `dO` of `len` values each (seeds 1 to 4), for a backward call.
pub(super) fn attention_inputs(len: usize) -> [Vec<f32>; 4] {
    [1, 2, 3, 4].map(|seed| random(len, seed))
}

/// Largest |a − b| over two slices of equal length; NaN when any difference is NaN
/// (`f32::max` drops a NaN, which would let a NaN output pass every tolerance).
pub(super) fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, |m, d| {
            if m.is_nan() || d.is_nan() {
                f32::NAN
            } else {
                m.max(d)
            }
        })
}
