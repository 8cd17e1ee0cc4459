use fire_vocabulary::Activation;

use super::{fire_pair, mlp_from_reference};
use crate::compile::PiecewiseLinear;
use crate::mlp::{Linear, Mlp};

fn check_exact(mlp: &Mlp, pl: &PiecewiseLinear) {
    let mut xs: Vec<f64> = (-400..=400).map(|k| f64::from(k) / 100.0).collect();
    for &t in pl.breakpoints() {
        xs.extend([t, t - 1e-9, t + 1e-9]);
    }
    xs.extend([-1e6, 1e6]);
    for x in xs {
        let want = mlp.eval(x);
        let got = pl.eval(x);
        for (w, g) in want.iter().zip(&got) {
            let tol = 1e-9 * (1.0 + w.abs() + x.abs());
            assert!((w - g).abs() <= tol, "x = {x}: mlp {w} vs compiled {g}");
        }
    }
}

#[test]
fn one_hidden_layer_breaks_exactly_at_minus_b_over_w() {
    // Two units: kinks at x = 0.5 (w = 2, b = −1) and x = −0.25 (w = −4, b = −1); a third
    // unit with w = 0 never switches.
    let hidden = Linear::new(vec![2.0, -4.0, 0.0], vec![-1.0, -1.0, 3.0], 1, 3).unwrap();
    let out = Linear::new(vec![1.0, 1.0, 1.0, -1.0, 2.0, 0.5], vec![0.0, 1.0], 3, 2).unwrap();
    let mlp = Mlp::new(vec![hidden, out], Activation::Relu, None).unwrap();
    let pl = PiecewiseLinear::compile(&mlp).unwrap();
    assert_eq!(pl.breakpoints(), &[-0.25, 0.5]);
    assert_eq!(pl.segments(), 3);
    // On (−0.25, 0.5) only the constant unit is on: head 0 = 3, head 1 = 1 + 0.5·3.
    assert_eq!(pl.piece(0, 1), (0.0, 3.0));
    assert_eq!(pl.piece(1, 1), (0.0, 2.5));
    check_exact(&mlp, &pl);
}

#[test]
fn compiled_equals_the_mlp_for_random_depths_and_seeds() {
    for depth in [0, 1, 2] {
        for seed in 0..6 {
            let (_, mlp, _) = fire_pair(12, 32, depth, seed, 1.0);
            let pl = PiecewiseLinear::compile(&mlp).unwrap();
            if depth == 1 {
                assert!(pl.breakpoints().len() <= 32);
            }
            if depth == 0 {
                assert!(pl.breakpoints().is_empty());
            }
            assert!(pl.breakpoints().windows(2).all(|w| w[0] < w[1]));
            check_exact(&mlp, &pl);
        }
    }
}

#[test]
fn a_final_relu_adds_per_head_kinks() {
    let (_, mut mlp, _) = fire_pair(4, 8, 1, 7, 1.0);
    mlp.final_activation = Some(Activation::Relu);
    let pl = PiecewiseLinear::compile(&mlp).unwrap();
    check_exact(&mlp, &pl);
}

#[test]
fn gelu_is_refused_and_matches_the_reference_directly() {
    let (f, mut mlp, _) = fire_pair(4, 8, 1, 3, 1.0);
    mlp.activation = Activation::Gelu;
    assert!(PiecewiseLinear::compile(&mlp).is_err());
    let mut r = f.mlp.clone();
    r.activation = fire_reference::fire::Activation::Gelu;
    for k in 0..50 {
        let x = f64::from(k) / 10.0 - 2.0;
        let want = r.eval(x);
        for (w, g) in want.iter().zip(mlp.eval(x)) {
            assert!((w - g).abs() < 1e-6, "gelu fallback at {x}: {w} vs {g}");
        }
    }
}

#[test]
fn the_reference_mlp_converts_faithfully() {
    let (f, mlp, _) = fire_pair(12, 32, 2, 11, 1.0);
    let again = mlp_from_reference(&f.mlp);
    assert_eq!(mlp, again);
    for x in [0.0, 0.3, 0.9, 1.7] {
        let want = f.mlp.eval(x);
        let got = mlp.eval(x);
        for (w, g) in want.iter().zip(&got) {
            assert!((w - g).abs() < 1e-12);
        }
    }
}
