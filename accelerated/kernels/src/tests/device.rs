//! The device kernel's tables and algorithm ([`crate::device`]) against the CPU kernels:
//! every source's [`DeviceBias::value`] equals its own tiles on the causal part, and the
//! row-at-a-time online softmax of the CUDA kernel equals the tiled one — so a GPU run has
//! only the CUDA transcription left to check.

use fire_vocabulary::{Activation, Position};

use super::{fire_pair, max_diff, random};
use crate::attention::{fused_causal, Shape};
use crate::baselines::{alibi_slopes, DistanceBias, DistanceEncoding};
use crate::device::{attend_rowwise, DeviceBias, DeviceTables};
use crate::fire::FireBias;

const H: usize = 3;

fn sources() -> Vec<(String, Box<dyn DeviceTables>)> {
    let mut out: Vec<(String, Box<dyn DeviceTables>)> = Vec::new();
    for depth in [1, 2] {
        let (_, mlp, params) = fire_pair(H, 8, depth, 3 + depth as u64, 40.0 / 512.0);
        out.push((
            format!("fire depth {depth}"),
            Box::new(FireBias::new(mlp, params, 256).unwrap()),
        ));
    }
    let half: Vec<f64> = (0..H).map(|h| 0.3 + 0.2 * h as f64).collect();
    for (name, e) in [
        (
            "alibi",
            DistanceEncoding::Alibi {
                slopes: alibi_slopes(H),
            },
        ),
        (
            "kerple-log",
            DistanceEncoding::KerpleLog {
                r1: half.clone(),
                r2: half.clone(),
            },
        ),
        (
            "t5",
            DistanceEncoding::T5 {
                buckets: 8,
                max_distance: 32,
                table: (0..H * 8).map(|t| t as f64 * 0.1 - 1.0).collect(),
            },
        ),
    ] {
        out.push((name.into(), Box::new(DistanceBias::new(e, H, 256).unwrap())));
    }
    out
}

#[test]
fn device_tables_reproduce_every_sources_tiles() {
    let (q0, nq, nk) = (100usize, 50usize, 150usize);
    let queries: Vec<Position> = (q0 as u64..(q0 + nq) as u64).collect();
    let keys: Vec<Position> = (0..nk as u64).collect();
    for (name, src) in sources() {
        let plan = src.plan(&queries, &keys).unwrap();
        let dev = src.device_bias(&queries, q0 + nq).unwrap();
        for h in 0..H {
            let mut tile = vec![0f32; nq * nk];
            plan.fill_causal(h, 0..nq, 0..nk, &mut tile, nk);
            for r in 0..nq {
                let i = q0 + r;
                for j in 0..=i.min(nk - 1) {
                    let (got, want) = (dev.value(h, r, i - j), tile[r * nk + j]);
                    assert!(
                        (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                        "{name}: head {h}, i {i}, j {j}: device {got} vs tile {want}"
                    );
                }
            }
        }
    }
}

#[test]
fn the_row_at_a_time_kernel_equals_the_tiled_kernel() {
    let (q0, nq, nk, d) = (70usize, 60usize, 130usize, 16usize);
    let queries: Vec<Position> = (q0 as u64..(q0 + nq) as u64).collect();
    let keys: Vec<Position> = (0..nk as u64).collect();
    let shape = Shape {
        heads: H,
        queries: nq,
        keys: nk,
        head_dim: d,
    };
    let q: Vec<f32> = random(H * nq * d, 1).iter().map(|x| 3.0 * x).collect();
    let k: Vec<f32> = random(H * nk * d, 2).iter().map(|x| 3.0 * x).collect();
    let v = random(H * nk * d, 3);
    let none = attend_rowwise(&q, &k, &v, shape, q0 as u64, &DeviceBias::None).unwrap();
    let want = fused_causal(&q, &k, &v, shape, &queries, &keys, None).unwrap();
    assert!(max_diff(&none, &want) < 2e-5, "no bias");
    for (name, src) in sources() {
        let plan = src.plan(&queries, &keys).unwrap();
        let dev = src.device_bias(&queries, q0 + nq).unwrap();
        let got = attend_rowwise(&q, &k, &v, shape, q0 as u64, &dev).unwrap();
        let want = fused_causal(&q, &k, &v, shape, &queries, &keys, Some(plan.as_ref())).unwrap();
        assert!(
            max_diff(&got, &want) < 2e-5,
            "{name}: {}",
            max_diff(&got, &want)
        );
    }
    // Tables too short for the positions are an error, not an out-of-bounds read.
    let (_, mlp, params) = fire_pair(H, 8, 1, 9, 1.0);
    let short = FireBias::new(mlp, params, 64)
        .unwrap()
        .device_bias(&queries, 64)
        .unwrap();
    assert!(attend_rowwise(&q, &k, &v, shape, q0 as u64, &short).is_err());
}

#[test]
fn gelu_fire_has_no_table_form() {
    let (_, mut mlp, params) = fire_pair(H, 8, 1, 5, 1.0);
    mlp.activation = Activation::Gelu;
    let fire = FireBias::new(mlp, params, 64).unwrap();
    assert!(fire.device_bias(&[0, 1], 2).is_none());
}
