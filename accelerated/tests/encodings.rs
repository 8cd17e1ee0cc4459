//! The accelerated encodings against the f64 reference and against their own slow twins.

#![allow(clippy::unwrap_used)] // tests may unwrap (workspace rule)

use candle_core::{Device, Tensor};
use fire_accelerated::config::{Activation, FireConfig};
use fire_accelerated::encodings::fire::Fire;
use fire_accelerated::encodings::{
    alibi, kerple, rope, sandwich, t5, Additive, AdditiveModule, Grid, PositionEncoding,
};
use fire_kernels::{alibi_slopes, t5_bucket, FireParams, Linear, Mlp};
use fire_reference::fire::init::{appendix_e, Shape};
use fire_reference::fire::{Threshold, Transform};
use fire_vocabulary::SplitMix64;

/// `|got − want| ≤ atol + rtol·max(|want|, 1)`, reporting the worst element.
fn assert_close(got: &[f32], want: &[f64], atol: f64, rtol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut worst = (0usize, 0.0f64);
    for (n, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (f64::from(g) - w).abs() - (atol + rtol * w.abs().max(1.0));
        if err > worst.1 || (n == 0 && err > 0.0) {
            worst = (n, err);
        }
    }
    assert!(
        worst.1 <= 0.0,
        "{what}: element {} got {} want {} (excess {:e})",
        worst.0,
        got[worst.0],
        want[worst.0],
        worst.1
    );
}

/// The reference module as plain numbers: f_θ and the scalars (ψ and the threshold are the
/// shared words, so they carry over as they are).
fn to_params(f: &fire_reference::Fire) -> (Mlp, FireParams) {
    let layers = f
        .mlp
        .layers
        .iter()
        .map(|l| {
            let (rows, cols) = l.weight.shape();
            let mut w = Vec::with_capacity(rows * cols);
            for r in 0..rows {
                for c in 0..cols {
                    w.push(l.weight[(r, c)]);
                }
            }
            Linear::new(w, l.bias.iter().copied().collect(), cols, rows).unwrap()
        })
        .collect();
    let activation = match f.mlp.activation {
        fire_reference::fire::Activation::Gelu => Activation::Gelu,
        _ => Activation::Relu,
    };
    let params = FireParams {
        c: f.c,
        l_init: f.l_init,
        l_multiplier: f.l_multiplier,
        eps: f.eps,
        transform: f.transform,
        threshold: f.threshold,
    };
    (Mlp::new(layers, activation, None).unwrap(), params)
}

/// The accelerated module of a reference one.
fn module(f: &fire_reference::Fire) -> fire_accelerated::Result<Fire> {
    let (mlp, params) = to_params(f);
    Fire::from_params(&mlp, &params, &Device::Cpu)
}

fn random_positions(rng: &mut SplitMix64, n: usize, max: u64) -> Vec<u64> {
    (0..n).map(|_| rng.below(max)).collect()
}

#[test]
fn fire_bias_matches_the_reference_on_random_parameters_and_positions() {
    let mut rng = SplitMix64::new(7);
    for case in 0..24u64 {
        let depth = (case % 3) as usize;
        let heads = 1 + (case % 5) as usize;
        let mut f = appendix_e(
            Shape {
                heads,
                width: 8 + (case % 3) as usize * 12,
                depth,
            },
            case,
        );
        f.c = rng.uniform(-2.0, 2.0);
        f.l_multiplier = rng.uniform(-1.5, 1.5);
        f.l_init = rng.uniform(1.0, 600.0);
        f.transform = if case % 4 == 3 {
            Transform::Identity
        } else {
            Transform::Log
        };
        f.threshold = match case % 3 {
            0 => Threshold::Learnable,
            1 => Threshold::Fixed,
            _ => Threshold::Disabled,
        };
        if case % 5 == 4 {
            f.mlp.activation = fire_reference::fire::Activation::Gelu;
        }
        let max = if case.is_multiple_of(2) { 64 } else { 40_000 };
        let queries = random_positions(&mut rng, 9, max);
        let keys = random_positions(&mut rng, 11, max);
        let want = fire_reference::evaluate(&f, &queries, &keys)
            .unwrap()
            .to_row_major();
        let fast = module(&f).unwrap();
        let got = fast.bias(&queries, &keys).unwrap();
        assert_close(&got, &want, 1e-5, 2e-5 * 64.0, &format!("case {case}"));
    }
}

#[test]
fn fire_at_appendix_e_defaults_matches_the_reference_on_a_causal_grid() {
    let f = appendix_e(Shape::default(), 3);
    let pos: Vec<u64> = (0..600).step_by(7).collect();
    let want = fire_reference::evaluate(&f, &pos, &pos)
        .unwrap()
        .to_row_major();
    let got = module(&f).unwrap().bias(&pos, &pos).unwrap();
    assert_close(&got, &want, 1e-5, 1e-5, "appendix E");
}

#[test]
fn fire_rejects_bad_parameters_with_errors() {
    let (mut mlp, p) = to_params(&appendix_e(Shape::default(), 1));
    mlp.layers[0].outputs = 5; // wrong width
    assert!(Fire::from_params(&mlp, &p, &Device::Cpu).is_err());
    let (mlp, mut p) = to_params(&appendix_e(Shape::default(), 1));
    p.c = f64::NAN;
    assert!(Fire::from_params(&mlp, &p, &Device::Cpu).is_err());
    let f = module(&appendix_e(Shape::default(), 1)).unwrap();
    assert!(f.bias(&[], &[1]).is_err());
}

#[test]
fn fire_state_dict_uses_appendix_e_names() {
    let cfg = FireConfig {
        depth: 2,
        ..FireConfig::default()
    };
    let f = fire_accelerated::encodings::fire::standalone(&cfg, 12, 0, &Device::Cpu).unwrap();
    let names: Vec<String> = f.state_dict().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "mlp.0.weight",
            "mlp.0.bias",
            "mlp.2.weight",
            "mlp.2.bias",
            "mlp.4.weight",
            "mlp.4.bias",
            "c",
            "init_L",
            "L_multiplier"
        ]
    );
    let shapes: Vec<Vec<usize>> = f
        .state_dict()
        .into_iter()
        .map(|(_, t)| t.dims().to_vec())
        .collect();
    assert_eq!(shapes[0], [32, 1]);
    assert_eq!(shapes[4], [12, 32]);
    assert!(shapes[6].is_empty(), "c is a scalar");
}

#[test]
fn fire_s_hands_every_layer_the_same_bias() {
    let dev = Device::Cpu;
    let f =
        fire_accelerated::encodings::fire::standalone(&FireConfig::default(), 4, 9, &dev).unwrap();
    let shared = Additive::shared("fire-s", f);
    let grid = Grid::causal(0, 16, &dev).unwrap();
    let b = shared.biases(&grid, 3).unwrap();
    let first: Vec<f32> = b[0]
        .as_ref()
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    for layer in &b[1..] {
        let v: Vec<f32> = layer
            .as_ref()
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_eq!(v, first);
    }
}

#[test]
fn alibi_slopes_follow_the_reference_schedule() {
    let s = alibi_slopes(8);
    for (h, v) in s.iter().enumerate() {
        assert!((v - 2f64.powf(-(h as f64 + 1.0))).abs() < 1e-12);
    }
    let s = alibi_slopes(12);
    assert_eq!(s.len(), 12);
    assert!((s[8] - 2f64.powf(-0.5)).abs() < 1e-12);
    assert!((s[11] - 2f64.powf(-3.5)).abs() < 1e-12);
}

#[test]
fn baselines_match_their_formulas_in_f64() {
    let dev = Device::Cpu;
    let q = [0u64, 3, 17, 200, 5000];
    let k = [0u64, 1, 3, 16, 180, 4999, 6000];
    let heads = 4;
    // Alibi
    let a = alibi::Alibi::new(heads, &dev)
        .unwrap()
        .bias(&q, &k)
        .unwrap();
    let slopes = alibi_slopes(heads);
    let mut want = Vec::new();
    for s in &slopes {
        for &i in &q {
            for &j in &k {
                want.push(-s * i.abs_diff(j) as f64);
            }
        }
    }
    assert_close(&a, &want, 1e-5, 1e-6, "alibi");
    // Kerple log and power
    let r1 = [0.5, 1.0, 1.7, 0.001];
    let r2 = [0.2, 0.9, 1.5, 2.0];
    for form in [kerple::Form::Log, kerple::Form::Power] {
        let got = kerple::Kerple::from_params(form, &r1, &r2, &dev)
            .unwrap()
            .bias(&q, &k)
            .unwrap();
        let mut want = Vec::new();
        for h in 0..heads {
            let p = r1[h].max(kerple::EPS);
            for &i in &q {
                for &j in &k {
                    let d = i.abs_diff(j) as f64;
                    want.push(match form {
                        kerple::Form::Log => -p * (r2[h].max(kerple::EPS) * d).ln_1p(),
                        kerple::Form::Power => -p * d.powf(r2[h].clamp(kerple::EPS, 2.0)),
                    });
                }
            }
        }
        assert_close(&got, &want, 1e-5, 1e-5, &format!("kerple {form:?}"));
    }
    // Sandwich (d = 16)
    let got = sandwich::Sandwich::new(heads, 16, &dev)
        .unwrap()
        .bias(&q, &k)
        .unwrap();
    let mut want = Vec::new();
    for h in 1..=heads {
        for &i in &q {
            for &j in &k {
                let d = i.abs_diff(j) as f64;
                let s: f64 = (1..=8)
                    .map(|m| (d / 10000f64.powf(2.0 * m as f64 / 16.0)).cos())
                    .sum();
                want.push((s - 8.0) / (h as f64 * 8.0 / heads as f64));
            }
        }
    }
    assert_close(&got, &want, 2e-3, 1e-5, "sandwich");
}

#[test]
fn t5_buckets_follow_the_official_map() {
    // N = 32, D = 128: exact below 16, log-binned to 31, everything >= 128 in the last bucket.
    let b = |n: u64| t5_bucket(n, 32, 128);
    for n in 0..16 {
        assert_eq!(b(n), n as usize);
    }
    assert_eq!(b(16), 16);
    assert_eq!(b(127), 31);
    assert_eq!(b(128), 31);
    assert_eq!(b(100_000), 31);
    // ln(n/16)/ln(8)·16 crosses 1 at n = 16·8^(1/16) ≈ 18.3.
    assert_eq!(b(18), 16);
    assert_eq!(b(19), 17);
    let table: Vec<Vec<f64>> = (0..32).map(|r| vec![r as f64, -(r as f64)]).collect();
    let t = t5::T5::from_params(&table, 128, &Device::Cpu).unwrap();
    // Keys after the query share bucket 0.
    assert_eq!(t.bias(&[3], &[10]).unwrap(), [0.0, 0.0]);
    let got = t.bias(&[20, 200], &[0, 19, 20]).unwrap();
    let want = [
        b(20) as f64,
        b(1) as f64,
        0.0,
        31.0,
        31.0,
        31.0,
        -(b(20) as f64),
        -1.0,
        0.0,
        -31.0,
        -31.0,
        -31.0,
    ];
    assert_close(&got, &want, 0.0, 0.0, "t5 lookup");
}

#[test]
fn rope_matches_its_slow_twin() {
    let dev = Device::Cpu;
    let mut rng = SplitMix64::new(5);
    for scale in [1.0, 4.0] {
        let r = rope::Rope::new(10_000.0, scale, 8).unwrap();
        let positions = [0u64, 1, 7, 1000, 31_000];
        let x: Vec<f32> = (0..2 * positions.len() * 8)
            .map(|_| rng.uniform(-1.0, 1.0) as f32)
            .collect();
        let t = Tensor::from_vec(x.clone(), (1, 2, positions.len(), 8), &dev).unwrap();
        let got: Vec<f32> = r
            .rotate(&t, &positions)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let mut want = Vec::new();
        for h in 0..2 {
            for (p, &pos) in positions.iter().enumerate() {
                let base = (h * positions.len() + p) * 8;
                let v: Vec<f64> = x[base..base + 8].iter().map(|&v| f64::from(v)).collect();
                want.extend(rope::rotate_slow(&r, &v, pos));
            }
        }
        assert_close(&got, &want, 1e-5, 1e-5, "rope");
    }
}
