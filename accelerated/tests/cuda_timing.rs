//! Timing of the CUDA fused attention at long lengths: fused FIRE (compiled f_θ tables),
//! fused Alibi (a distance table) and fused NoPE (no bias), 12 heads of 64, causal, f32, on one
//! GPU. Needs a GPU, so it is ignored by default; `accelerated/scripts/gpu-device.sh` runs it from
//! the prebuilt bundle (`gpu-bundle.sh`) next to a bias-free PyTorch SDPA on the same GPU.
//!
//! Configuration by environment (the test binary takes no arguments of its own):
//! `FIRE_TIMING_LENGTHS` (default `8192,32768`), `FIRE_TIMING_REPEATS` (default 3). Each
//! measurement is printed as one line `TIMING {json}` for the device script to collect.
#![cfg(feature = "cuda")]
#![allow(clippy::unwrap_used)] // tests may unwrap (workspace rule)

use std::time::Instant;

use candle_core::{Device, Tensor};
use fire_kernels::{self as fast, DeviceBias, DeviceTables};

fn env_list(name: &str, default: &str) -> Vec<usize> {
    std::env::var(name)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .map(|s| s.trim().parse().unwrap())
        .collect()
}

#[test]
#[ignore = "needs a CUDA GPU; run by accelerated/scripts/gpu-device.sh"]
fn time_the_cuda_fused_kernel_at_long_lengths() {
    let cuda = Device::new_cuda(0).unwrap();
    let (h, d) = (12usize, 64usize);
    let repeats = env_list("FIRE_TIMING_REPEATS", "3")[0].max(1);
    for n in env_list("FIRE_TIMING_LENGTHS", "8192,32768") {
        let shape = (1, h, n, d);
        let (q, k, v) = (
            Tensor::rand(-1f32, 1f32, shape, &cuda).unwrap(),
            Tensor::rand(-1f32, 1f32, shape, &cuda).unwrap(),
            Tensor::rand(-1f32, 1f32, shape, &cuda).unwrap(),
        );
        let positions: Vec<u64> = (0..n as u64).collect();
        // Appendix E's module and scalars (init_L = 512), as in `fire-lm bench`.
        let fire = fast::FireBias::new(
            fast::bench::appendix_e_mlp(h, 7).unwrap(),
            fast::FireParams::appendix_e(),
            n,
        )
        .unwrap();
        let alibi = fast::DistanceBias::new(
            fast::DistanceEncoding::Alibi {
                slopes: fast::alibi_slopes(h),
            },
            h,
            n,
        )
        .unwrap();
        let sources: [(&str, Option<&dyn DeviceTables>); 3] = [
            ("fused-nope", None),
            ("fused-fire", Some(&fire)),
            ("fused-alibi", Some(&alibi)),
        ];
        let mut nope_median = f64::NAN;
        for (name, src) in sources {
            // The host-side tables (compiled FIRE: ψ, per-query normalisers, segments).
            let t = Instant::now();
            let bias = src.map_or(DeviceBias::None, |s| s.device_bias(&positions, n).unwrap());
            let tables_s = t.elapsed().as_secs_f64();
            let run = || {
                let t = Instant::now();
                let out =
                    fire_accelerated::attention::cuda::attend(&q, &k, &v, 0, bias.clone()).unwrap();
                cuda.synchronize().unwrap();
                (t.elapsed().as_secs_f64(), out)
            };
            // The first call compiles the kernel (NVRTC) and loads it; time it apart.
            let (first_s, out) = run();
            let finite: f32 = out.abs().unwrap().max_all().unwrap().to_scalar().unwrap();
            assert!(finite.is_finite(), "{name} at N = {n}: non-finite output");
            let mut times: Vec<f64> = (0..repeats).map(|_| run().0).collect();
            times.sort_by(f64::total_cmp);
            let median = times[times.len() / 2];
            if src.is_none() {
                nope_median = median;
            }
            // Causal pairs per second, for a size-free comparison.
            let pairs = (h * n * (n + 1) / 2) as f64;
            println!(
                "TIMING {}",
                serde_json::json!({
                    "variant": name, "n": n, "heads": h, "head_dim": d, "repeats": repeats,
                    "median_s": median, "min_s": times[0], "first_call_s": first_s,
                    "host_tables_s": tables_s, "ratio_to_nope": median / nope_median,
                    "causal_pairs_per_s": pairs / median,
                })
            );
        }
    }
}
