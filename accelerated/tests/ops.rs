//! The fused CPU ops ([`fire_accelerated::ops`]) and the fused AdamW against their slow twins,
//! the compositions of candle primitives: values and every gradient, on random inputs of
//! several shapes (rows that split unevenly over the parallel tasks included).

#![allow(clippy::unwrap_used)] // tests may unwrap (workspace rule)

mod common;
use common::{largest, max_abs_diff};

use std::collections::BTreeMap;

use candle_core::{Device, Tensor, Var};
use fire_accelerated::nn::{self, LayerNorm, Linear};
use fire_accelerated::ops;
use fire_accelerated::optim::{AdamW, AdamWConfig};
use fire_vocabulary::SplitMix64;

fn random(shape: &[usize], scale: f64, seed: u64) -> Tensor {
    let mut rng = SplitMix64::new(seed);
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|_| (rng.normal() * scale) as f32).collect();
    Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
}

fn values(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1().unwrap()
}

/// max |a − b| ≤ tol · max(1, max |b|).
fn close(what: &str, a: &Tensor, b: &Tensor, tol: f32) {
    assert_eq!(a.dims(), b.dims(), "{what}: shapes");
    let (a, b) = (values(a), values(b));
    let scale = largest(&b).max(1.0);
    let diff = max_abs_diff(&a, &b);
    assert!(
        diff <= tol * scale,
        "{what}: max |Δ| = {diff:e}, scale {scale:e}"
    );
}

/// `Σ out ⊙ w` for a fixed random `w`: a loss whose gradient is `w`, so every output entry
/// gets its own cotangent.
fn weighted_sum(out: &Tensor, seed: u64) -> Tensor {
    let w = random(out.dims(), 1.0, seed);
    (out * w).unwrap().sum_all().unwrap()
}

#[test]
fn layer_norm_matches_its_composed_twin_in_values_and_gradients() {
    for (shape, seed) in [
        (vec![3, 5, 16], 1),
        (vec![2, 200, 128], 2),
        (vec![7, 33], 3),
    ] {
        let d = *shape.last().unwrap();
        let x = Var::from_tensor(&(random(&shape, 2.0, seed) + 0.5).unwrap()).unwrap();
        let ln = LayerNorm {
            weight: Var::from_tensor(&(random(&[d], 0.3, seed + 10) + 1.0).unwrap())
                .unwrap()
                .as_tensor()
                .clone(),
            bias: Var::from_tensor(&random(&[d], 0.3, seed + 20))
                .unwrap()
                .as_tensor()
                .clone(),
            eps: 1e-5,
        };
        let fused = ops::layer_norm(x.as_tensor(), &ln.weight, &ln.bias, ln.eps).unwrap();
        let slow = ln.forward_composed(x.as_tensor()).unwrap();
        close("layer norm", &fused, &slow, 1e-5);
        let gf = weighted_sum(&fused, 99).backward().unwrap();
        let gs = weighted_sum(&slow, 99).backward().unwrap();
        for (name, t) in [("x", x.as_tensor()), ("γ", &ln.weight), ("β", &ln.bias)] {
            close(
                &format!("layer norm d{name} {shape:?}"),
                gf.get(t).unwrap(),
                gs.get(t).unwrap(),
                2e-5,
            );
        }
        // The dispatching entry point takes the fused op on the CPU.
        close(
            "LayerNorm::forward",
            &ln.forward(x.as_tensor()).unwrap(),
            &slow,
            1e-5,
        );
    }
}

#[test]
fn bias_gelu_matches_add_then_gelu_erf() {
    for (shape, seed) in [(vec![4, 9, 64], 1), (vec![300, 96], 2), (vec![1, 7], 3)] {
        let n = *shape.last().unwrap();
        let y = Var::from_tensor(&random(&shape, 2.5, seed)).unwrap();
        let b = Var::from_tensor(&random(&[n], 0.5, seed + 1)).unwrap();
        let fused = ops::bias_gelu(y.as_tensor(), b.as_tensor()).unwrap();
        let slow = y
            .as_tensor()
            .broadcast_add(b.as_tensor())
            .unwrap()
            .gelu_erf()
            .unwrap();
        close("bias gelu", &fused, &slow, 1e-6);
        let gf = weighted_sum(&fused, 7).backward().unwrap();
        let gs = weighted_sum(&slow, 7).backward().unwrap();
        close(
            "bias gelu dy",
            gf.get(y.as_tensor()).unwrap(),
            gs.get(y.as_tensor()).unwrap(),
            1e-5,
        );
        close(
            "bias gelu db",
            gf.get(b.as_tensor()).unwrap(),
            gs.get(b.as_tensor()).unwrap(),
            1e-5,
        );
    }
}

#[test]
fn linear_gelu_and_plain_linear_keep_their_meaning() {
    let mut store = fire_accelerated::params::ParamStore::fresh(&Device::Cpu, 3);
    let lin = Linear::new(&mut store.root().pp("fc"), 24, 40, true).unwrap();
    let x = random(&[2, 5, 24], 1.0, 4);
    let want = x
        .broadcast_matmul(&lin.weight.t().unwrap())
        .unwrap()
        .broadcast_add(lin.bias.as_ref().unwrap())
        .unwrap();
    close("linear", &lin.forward(&x).unwrap(), &want, 1e-6);
    close(
        "linear gelu",
        &lin.forward_gelu(&x).unwrap(),
        &want.gelu_erf().unwrap(),
        1e-6,
    );
}

#[test]
fn cross_entropy_matches_its_composed_twin() {
    for (rows, vocab, seed) in [(5, 11, 1), (2048, 256, 2), (37, 300, 3)] {
        let logits = Var::from_tensor(&random(&[rows, vocab], 3.0, seed)).unwrap();
        let mut rng = SplitMix64::new(seed + 5);
        let t: Vec<u32> = (0..rows).map(|_| rng.below(vocab as u64) as u32).collect();
        let targets = Tensor::from_vec(t, rows, &Device::Cpu).unwrap();
        let fused = ops::cross_entropy(logits.as_tensor(), &targets).unwrap();
        let slow = nn::cross_entropy_composed(logits.as_tensor(), &targets).unwrap();
        close("cross entropy", &fused, &slow, 1e-6);
        // A cotangent other than 1 (the loss scaled by 3).
        let gf = (fused * 3.0).unwrap().backward().unwrap();
        let gs = (slow * 3.0).unwrap().backward().unwrap();
        close(
            "cross entropy dlogits",
            gf.get(logits.as_tensor()).unwrap(),
            gs.get(logits.as_tensor()).unwrap(),
            1e-6,
        );
    }
}

/// A non-finite logit anywhere in a row makes the loss and that row's gradient NaN (training's
/// divergence check must see it), however the row's exponentials are computed.
#[test]
fn cross_entropy_propagates_a_non_finite_logit() {
    for bad in [f32::NAN, f32::INFINITY] {
        let mut x = values(&random(&[3, 40], 1.0, 9));
        x[40 + 33] = bad; // row 1, past the first 32 lanes
        let logits =
            Var::from_tensor(&Tensor::from_vec(x, (3, 40), &Device::Cpu).unwrap()).unwrap();
        let targets = Tensor::from_vec(vec![0u32, 1, 2], 3, &Device::Cpu).unwrap();
        let loss = ops::cross_entropy(logits.as_tensor(), &targets).unwrap();
        assert!(loss.to_scalar::<f32>().unwrap().is_nan(), "{bad}: loss");
        let g = values(loss.backward().unwrap().get(logits.as_tensor()).unwrap());
        assert!(
            g[40..80].iter().all(|v| v.is_nan()),
            "{bad}: row 1's gradient"
        );
        assert!(
            g[..40].iter().all(|v| v.is_finite()),
            "{bad}: row 0's gradient"
        );
    }
}

#[test]
fn cross_entropy_refuses_targets_outside_the_vocabulary() {
    let logits = random(&[2, 4], 1.0, 1);
    let targets = Tensor::from_vec(vec![1u32, 4], 2, &Device::Cpu).unwrap();
    assert!(ops::cross_entropy(&logits, &targets).is_err());
}

#[test]
fn fused_adamw_follows_the_composed_update_step_by_step() {
    let shapes: [(&str, &[usize]); 4] = [
        ("layers.0.mlp.fc1.weight", &[48, 40_000]),
        ("layers.0.mlp.fc1.bias", &[48]),
        ("layers.0.attn.fire.c", &[]),
        ("embed.weight", &[17, 8]),
    ];
    let make = || -> BTreeMap<String, Var> {
        shapes
            .iter()
            .enumerate()
            .map(|(i, (n, s))| {
                let t = random(s, 0.1, 40 + i as u64);
                ((*n).to_owned(), Var::from_tensor(&t).unwrap())
            })
            .collect()
    };
    let (fast_params, slow_params) = (make(), make());
    let cfg = AdamWConfig::default();
    let mut fast = AdamW::new(cfg, &fast_params).unwrap();
    let mut slow = AdamW::new_composed(cfg, &slow_params).unwrap();
    for step in 0..5u64 {
        let grads: BTreeMap<String, Tensor> = shapes
            .iter()
            .enumerate()
            .map(|(i, (n, s))| ((*n).to_owned(), random(s, 0.01, 100 * step + i as u64)))
            .collect();
        let lr = 1e-2 / (step + 1) as f64;
        fast.update(&fast_params, &grads, lr).unwrap();
        slow.update_composed(&slow_params, &grads, lr).unwrap();
    }
    for (name, p) in &fast_params {
        close(
            &format!("adamw {name}"),
            p.as_tensor(),
            slow_params[name].as_tensor(),
            1e-6,
        );
    }
    // The moments save under the same names and restore to the same next step.
    let (sf, ss) = (fast.state_tensors(), slow.state_tensors());
    assert_eq!(sf.len(), ss.len());
    for (k, t) in &ss {
        close(&format!("moment {k}"), &sf[k], t, 1e-6);
    }
    let mut restored = AdamW::new(cfg, &fast_params).unwrap();
    restored.load_state(&sf, fast.step).unwrap();
    let again = restored.state_tensors();
    for (k, t) in &sf {
        assert_eq!(values(&again[k]), values(t), "{k} round trip");
    }
}
