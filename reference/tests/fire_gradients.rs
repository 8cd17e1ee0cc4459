//! Analytic gradients (spec/gradients.md) against central differences, and the kink conventions.

mod common;

use common::{any_fire, causal_pair};
use fire_reference::fire::grad::{jacobian, vjp, FireGradient};
use fire_reference::fire::init::{self, Shape};
use fire_reference::fire::{Fire, Threshold};
use fire_reference::{evaluate, AdditiveBias, Bias};
use nalgebra::DMatrix;
use proptest::prelude::*;

/// Every trainable scalar of `fire`, in [grad.layout] order, as (getter, setter) through a flat index.
fn params(fire: &Fire) -> Vec<f64> {
    let mut out = Vec::new();
    for l in &fire.mlp.layers {
        for r in 0..l.weight.nrows() {
            out.extend(l.weight.row(r).iter().copied());
        }
        out.extend(l.bias.iter().copied());
    }
    out.push(fire.c);
    out.push(fire.l_multiplier);
    out
}

fn with_param(fire: &Fire, index: usize, value: f64) -> Fire {
    let mut f = fire.clone();
    let mut n = index;
    for l in &mut f.mlp.layers {
        let (rows, cols) = l.weight.shape();
        if n < rows * cols {
            l.weight[(n / cols, n % cols)] = value;
            return f;
        }
        n -= rows * cols;
        if n < rows {
            l.bias[n] = value;
            return f;
        }
        n -= rows;
    }
    match n {
        0 => f.c = value,
        _ => f.l_multiplier = value,
    }
    f
}

fn central_difference(fire: &Fire, h: usize, i: f64, j: f64, index: usize) -> f64 {
    let p = params(fire)[index];
    let step = 1e-6 * p.abs().max(1e-2);
    let up = with_param(fire, index, p + step).bias_at(i, j)[h];
    let down = with_param(fire, index, p - step).bias_at(i, j)[h];
    (up - down) / (2.0 * step)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// [grad.theta], [grad.c], [grad.m]: the analytic Jacobian matches central differences away
    /// from kinks.
    #[test]
    fn jacobian_matches_central_differences(fire in any_fire(), (i, j) in causal_pair(3000)) {
        let l = fire.threshold_value().unwrap_or(-1.0);
        // Stay clear of the max(i, L) kink: the finite-difference step would straddle it.
        prop_assume!((i as f64 - l).abs() > 1e-3 * l.max(1.0));
        let x = fire.input(i as f64, j as f64);
        // …and of ReLU kinks in the first layer.
        let first = &fire.mlp.layers[0];
        prop_assume!((0..first.bias.len()).all(|k| (first.weight[(k, 0)] * x + first.bias[k]).abs() > 1e-4));
        for h in 0..fire.heads() {
            let analytic = jacobian(&fire, h, i, j).unwrap().to_flat();
            let p = params(&fire);
            prop_assert_eq!(analytic.len(), p.len());
            for (index, a) in analytic.iter().enumerate() {
                if fire.threshold != Threshold::Learnable && index == p.len() - 1 {
                    prop_assert_eq!(*a, 0.0, "a frozen or absent threshold has no gradient");
                    continue;
                }
                let numeric = central_difference(&fire, h, i as f64, j as f64, index);
                let tol = 1e-5 * (1.0 + numeric.abs().max(a.abs()));
                prop_assert!((a - numeric).abs() <= tol,
                    "head {h} param {index}: analytic {a} vs numeric {numeric}");
            }
        }
    }

    /// [grad.vjp]: the VJP equals the cotangent-weighted sum of Jacobian rows.
    #[test]
    fn vjp_is_the_weighted_sum_of_jacobians(
        fire in any_fire(),
        queries in prop::collection::vec(0u64..2000, 1..4),
        keys in prop::collection::vec(0u64..2000, 1..4),
        seed in any::<u64>(),
    ) {
        let mut rng = init::SplitMix64::new(seed);
        let heads = (0..fire.heads())
            .map(|_| DMatrix::from_fn(queries.len(), keys.len(), |_, _| rng.uniform(-1.0, 1.0)))
            .collect();
        let g = Bias::from_heads(heads).unwrap();
        let got = vjp(&fire, &queries, &keys, &g).unwrap().to_flat();
        let mut want = vec![0.0; got.len()];
        for h in 0..fire.heads() {
            for (q, &i) in queries.iter().enumerate() {
                for (k, &j) in keys.iter().enumerate() {
                    let row = jacobian(&fire, h, i, j).unwrap().to_flat();
                    for (w, r) in want.iter_mut().zip(row) {
                        *w += g.get(h, q, k) * r;
                    }
                }
            }
        }
        for (a, b) in got.iter().zip(&want) {
            prop_assert!((a - b).abs() <= 1e-12 * (1.0 + b.abs()));
        }
    }
}

/// [grad.kinks]: at the tie i = L the gradient with respect to m is the mean of the one-sided
/// derivatives (PyTorch and JAX split `maximum` ties evenly).
#[test]
fn tie_at_threshold_splits_the_gradient() {
    let fire = init::appendix_e(Shape::default(), 3); // L = 512 exactly
    let (i, j) = (512u64, 100u64);
    let m = fire.l_multiplier;
    let step = 1e-7;
    let mut up = fire.clone();
    up.l_multiplier = m + step;
    let mut down = fire.clone();
    down.l_multiplier = m - step;
    for h in 0..fire.heads() {
        let b0 = fire.bias_at(i as f64, j as f64)[h];
        let right = (up.bias_at(i as f64, j as f64)[h] - b0) / step;
        let left = (b0 - down.bias_at(i as f64, j as f64)[h]) / step;
        assert_eq!(left, 0.0, "below the tie, max(i, L) = i does not move");
        let analytic = jacobian(&fire, h, i, j).unwrap().l_multiplier;
        assert!(
            (analytic - 0.5 * (left + right)).abs() <= 1e-5 * (1.0 + right.abs()),
            "head {h}: {analytic} vs ½({left} + {right})"
        );
    }
}

/// [grad.kinks]: sign(0) = 0, so c = 0 without the log transform, and the diagonal, give no
/// gradient through |·|; and above the threshold m gets none.
#[test]
fn zero_subgradients() {
    let fire = init::appendix_e(Shape::default(), 4);
    // Diagonal: x = 0 whatever c is, and ψ(0) = 0 has zero derivative in c.
    let diag = jacobian(&fire, 0, 700, 700).unwrap();
    assert_eq!(diag.c, 0.0);
    // Above the threshold, the normaliser ignores L.
    let above = jacobian(&fire, 0, 900, 3).unwrap();
    assert_eq!(above.l_multiplier, 0.0);
    // m = 0 makes L = 0: sign(0) = 0.
    let mut zero_m = fire.clone();
    zero_m.l_multiplier = 0.0;
    assert_eq!(jacobian(&zero_m, 0, 0, 0).unwrap().l_multiplier, 0.0);
}

/// [grad.layout]: the flat layout has one entry per trainable scalar plus c and m.
#[test]
fn flat_layout_counts_every_parameter() {
    let fire = init::appendix_e(Shape::default(), 5);
    let g = FireGradient::zeros(&fire.mlp);
    assert_eq!(g.to_flat().len(), fire.mlp.parameter_count() + 2);
    // And the bias the gradient belongs to is the one evaluate() returns.
    let b = evaluate(&fire, &[3], &[1]).unwrap();
    assert_eq!(b.get(2, 0, 0), fire.bias_at(3.0, 1.0)[2]);
}
