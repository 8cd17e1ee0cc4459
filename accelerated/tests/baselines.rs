//! Every accelerated baseline against `fire_reference::baselines` at arbitrary positions.

#![allow(clippy::unwrap_used)] // tests may unwrap (workspace rule)

use candle_core::Device;
use fire_accelerated::encodings::{alibi, kerple, sandwich, t5, AdditiveModule};
use fire_kernels::t5_bucket;
use fire_reference::baselines::{
    Alibi, KerpleLog, KerplePower, OfficialBucketing, SandwichCentred, T5Official,
};
use fire_vocabulary::SplitMix64;

fn assert_close(got: &[f32], want: &[f64], atol: f64, rtol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (n, (&g, &w)) in got.iter().zip(want).enumerate() {
        let tol = atol + rtol * w.abs().max(1.0);
        assert!(
            (f64::from(g) - w).abs() <= tol,
            "{what}: element {n} got {g} want {w} (tolerance {tol:e})"
        );
    }
}

fn positions(rng: &mut SplitMix64, n: usize, max: u64) -> Vec<u64> {
    (0..n).map(|_| rng.below(max)).collect()
}

#[test]
fn baselines_match_the_reference_at_random_positions() {
    let dev = Device::Cpu;
    let mut rng = SplitMix64::new(42);
    for case in 0..12u64 {
        let heads = 1 + (case % 12) as usize;
        let max = [16, 300, 5000, 70_000][case as usize % 4];
        let q = positions(&mut rng, 7, max);
        let k = positions(&mut rng, 9, max);
        let what = |name: &str| format!("{name}, case {case}, {heads} heads");

        let want = fire_reference::evaluate(&Alibi::standard(heads).unwrap(), &q, &k).unwrap();
        let got = alibi::Alibi::new(heads, &dev)
            .unwrap()
            .bias(&q, &k)
            .unwrap();
        assert_close(&got, &want.to_row_major(), 0.0, 1e-6, &what("alibi"));

        let r1: Vec<f64> = (0..heads).map(|_| rng.uniform(0.05, 2.0)).collect();
        let r2: Vec<f64> = (0..heads).map(|_| rng.uniform(0.05, 2.0)).collect();
        let reference = KerpleLog {
            r1: r1.clone(),
            r2: r2.clone(),
        };
        let want = fire_reference::evaluate(&reference, &q, &k).unwrap();
        let got = kerple::Kerple::from_params(kerple::Form::Log, &r1, &r2, &dev)
            .unwrap()
            .bias(&q, &k)
            .unwrap();
        assert_close(&got, &want.to_row_major(), 1e-6, 2e-6, &what("kerple-log"));

        let reference = KerplePower {
            r1: r1.clone(),
            r2: r2.clone(),
        };
        let want = fire_reference::evaluate(&reference, &q, &k).unwrap();
        let got = kerple::Kerple::from_params(kerple::Form::Power, &r1, &r2, &dev)
            .unwrap()
            .bias(&q, &k)
            .unwrap();
        assert_close(
            &got,
            &want.to_row_major(),
            1e-6,
            1e-5,
            &what("kerple-power"),
        );

        let head_dim = 2 * (1 + case as u32 % 16);
        let reference = SandwichCentred { heads, head_dim };
        let want = fire_reference::evaluate(&reference, &q, &k).unwrap();
        let got = sandwich::Sandwich::new(heads, head_dim as usize, &dev)
            .unwrap()
            .bias(&q, &k)
            .unwrap();
        // cos of angles up to ~7·10⁴ rad in f32: absolute error ≈ angle·2⁻²⁴ per term.
        let atol = 1e-7 * max as f64 * f64::from(head_dim);
        assert_close(&got, &want.to_row_major(), atol, 1e-5, &what("sandwich"));

        let (buckets, max_distance) = [(32u32, 128u64), (8, 20), (64, 1000)][case as usize % 3];
        let values: Vec<Vec<f64>> = (0..heads)
            .map(|_| (0..buckets).map(|_| rng.uniform(-1.0, 1.0)).collect())
            .collect();
        let reference = T5Official {
            bucketing: OfficialBucketing::new(buckets, max_distance, false).unwrap(),
            values: values.clone(),
        };
        let want = fire_reference::evaluate(&reference, &q, &k).unwrap();
        let table: Vec<Vec<f64>> = (0..buckets as usize)
            .map(|b| values.iter().map(|row| row[b]).collect())
            .collect();
        let got = t5::T5::from_params(&table, max_distance, &dev)
            .unwrap()
            .bias(&q, &k)
            .unwrap();
        assert_close(&got, &want.to_row_major(), 1e-7, 1e-7, &what("t5"));
    }
}

#[test]
fn t5_buckets_equal_the_reference_bucketing_on_every_small_distance() {
    for (n_buckets, max_distance) in [(32u32, 128u64), (8, 20), (64, 1000), (2, 2)] {
        let official = OfficialBucketing::new(n_buckets, max_distance, false).unwrap();
        for n in 0..5000u64 {
            assert_eq!(
                t5_bucket(n, n_buckets as usize, max_distance),
                official.bucket_of(n, 0) as usize,
                "N = {n_buckets}, D = {max_distance}, n = {n}"
            );
        }
    }
}
