//! CUDA against CPU on one trained checkpoint: every FIRE module's bias and one full forward
//! pass must agree to f32 rounding. Needs a GPU, so it is ignored by default and run by
//! `accelerated/scripts/gpu-check.sh` (which sets `FIRE_PARITY_RUN`); `--features cuda` builds
//! it, so CI's CUDA compile-check keeps it compiling.
#![cfg(feature = "cuda")]
#![allow(clippy::unwrap_used)] // tests may unwrap (workspace rule)

use std::path::PathBuf;

use candle_core::{Device, Tensor};
use fire_accelerated::attention::Backend;
use fire_accelerated::encodings::Grid;
use fire_accelerated::train::checkpoint::load_model;

/// Largest |a - b| relative to the largest |a| (at least 1).
fn rel_diff(a: &Tensor, b: &Tensor) -> f32 {
    let b = b.to_device(a.device()).unwrap();
    let diff: f32 = (a - &b)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar()
        .unwrap();
    let scale: f32 = a.abs().unwrap().max_all().unwrap().to_scalar().unwrap();
    diff / scale.max(1.0)
}

#[test]
#[ignore = "needs a CUDA GPU and a checkpoint; run by accelerated/scripts/gpu-check.sh"]
fn cuda_matches_cpu_on_a_checkpoint() {
    let run =
        PathBuf::from(std::env::var("FIRE_PARITY_RUN").expect("FIRE_PARITY_RUN: a run directory"));
    let cuda = Device::new_cuda(0).unwrap();
    let (on_cpu, loaded) = load_model(&run, &Device::Cpu).unwrap();
    let (on_gpu, _) = load_model(&run, &cuda).unwrap();
    let seq = loaded.state.train.seq_len as u64;

    // FIRE's bias for a query at the training length and at 8x it (past the threshold).
    let modules = on_cpu.encoding.modules();
    assert!(
        !modules.is_empty(),
        "the checkpoint must be a FIRE or FIRE-S model"
    );
    for query in [seq - 1, 8 * seq - 1] {
        let keys: Vec<u64> = (0..=query).collect();
        let g_cpu = Grid::new(&[query], &keys, &Device::Cpu).unwrap();
        let g_gpu = Grid::new(&[query], &keys, &cuda).unwrap();
        for (l, (c, g)) in modules.iter().zip(on_gpu.encoding.modules()).enumerate() {
            let d = rel_diff(
                &c.bias_tensor(&g_cpu).unwrap(),
                &g.bias_tensor(&g_gpu).unwrap(),
            );
            println!("FIRE bias, layer {l}, query {query}: max relative difference {d:.2e}");
            assert!(
                d < 1e-5,
                "layer {l}, query {query}: CUDA bias differs from CPU by {d}"
            );
        }
    }

    // One forward pass over 2 x seq tokens of fixed bytes.
    let n = 2 * seq as usize;
    let tokens: Vec<u32> = (0..n).map(|i| (i * 37 % 251) as u32).collect();
    let x_cpu = Tensor::from_vec(tokens.clone(), (1, n), &Device::Cpu).unwrap();
    let x_gpu = Tensor::from_vec(tokens, (1, n), &cuda).unwrap();
    let candle = Backend::Candle { chunk: usize::MAX };
    let y_cpu = on_cpu.forward(&x_cpu, &candle, None).unwrap();
    let y_gpu = on_gpu.forward(&x_gpu, &candle, None).unwrap();
    let d = rel_diff(&y_cpu, &y_gpu);
    println!("forward pass over {n} tokens: max relative logit difference {d:.2e}");
    assert!(d < 1e-3, "CUDA logits differ from CPU by {d}");
}

/// Random `[1, H, n, d]` values in [−2, 2).
fn random(h: usize, n: usize, d: usize, seed: u64, dev: &Device) -> Tensor {
    let mut rng = fire_vocabulary::SplitMix64::new(seed);
    let v: Vec<f32> = (0..h * n * d)
        .map(|_| (rng.uniform(-1.0, 1.0) * 2.0) as f32)
        .collect();
    Tensor::from_vec(v, (1, h, n, d), dev).unwrap()
}

#[test]
#[ignore = "needs a CUDA GPU; run by accelerated/scripts/gpu-check.sh"]
fn the_cuda_fused_kernel_matches_the_cpu_kernel() {
    use fire_kernels::{self as fast, DeviceTables, TileBias};
    let cuda = Device::new_cuda(0).unwrap();
    let (h, d) = (4, 64);
    // A whole sequence (q0 = 0) and a KV-cache continuation (q0 = 300).
    for (q0, nq) in [(0usize, 700usize), (300, 45)] {
        let nk = q0 + nq;
        let mlp = fast::bench::appendix_e_mlp(h, 7).unwrap();
        let mut params = fast::FireParams::appendix_e();
        params.l_multiplier = 0.25; // L = 128: rows on both sides of the threshold
        let fire = fast::FireBias::new(mlp, params, nk).unwrap();
        let alibi = fast::DistanceBias::new(
            fast::DistanceEncoding::Alibi {
                slopes: fast::alibi_slopes(h),
            },
            h,
            nk,
        )
        .unwrap();
        let queries: Vec<u64> = (q0 as u64..nk as u64).collect();
        let keys: Vec<u64> = (0..nk as u64).collect();
        let (q, k, v) = (
            random(h, nq, d, 1, &Device::Cpu),
            random(h, nk, d, 2, &Device::Cpu),
            random(h, nk, d, 3, &Device::Cpu),
        );
        let flat = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let shape = fast::Shape {
            heads: h,
            queries: nq,
            keys: nk,
            head_dim: d,
        };
        for (name, src) in [
            ("none", None),
            ("fire", Some(&fire as &dyn DeviceTables)),
            ("alibi", Some(&alibi as &dyn DeviceTables)),
        ] {
            let tiles = src.map(|s| s as &dyn TileBias);
            let want = fast::attend(
                &flat(&q),
                &flat(&k),
                &flat(&v),
                shape,
                &queries,
                &keys,
                tiles,
            )
            .unwrap();
            let bias = src.map_or(fast::DeviceBias::None, |s| {
                s.device_bias(&queries, nk).unwrap()
            });
            let got = fire_accelerated::attention::cuda::attend(
                &q.to_device(&cuda).unwrap(),
                &k.to_device(&cuda).unwrap(),
                &v.to_device(&cuda).unwrap(),
                q0,
                bias,
            )
            .unwrap();
            let want = Tensor::from_vec(want, (1, h, nq, d), &Device::Cpu).unwrap();
            let diff = rel_diff(&want, &got);
            println!("CUDA fused kernel, {name}, q0 {q0}, {nq} queries: max difference {diff:.2e}");
            assert!(
                diff < 1e-4,
                "{name}, q0 {q0}: CUDA kernel differs from the CPU by {diff}"
            );
        }
    }
}
