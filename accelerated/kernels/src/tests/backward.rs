//! The backward pass's bias gradients against `fire_reference`'s literal vector-Jacobian
//! product ([grad.vjp]): the compiled path (segment sums, one backpropagation per segment) and
//! its slow twin (per-pair backpropagation) both give Σ G·∂b/∂(θ, c, m) for a causal
//! cotangent G (and one on keys after the query too), across the threshold (with the ½ tie
//! at i = L), for contiguous and gapped positions; and a distance table's gradient is G
//! summed per distance.

use std::ops::Range;

use nalgebra::DMatrix;

use fire_vocabulary::Position;

use super::{attention_inputs, fire_pair, random};
use crate::attention::Shape;
use crate::backward::{fused_causal_backward, GradPlan};
use crate::fire::FireBias;
use crate::table::DistanceTable;

/// A causal cotangent `[H, Q, K]` (zero where `j > i`), row-major f32, and its reference twin.
fn cotangent(
    heads: usize,
    queries: &[Position],
    keys: &[Position],
    seed: u64,
) -> (Vec<f32>, fire_reference::Bias) {
    cotangent_on(heads, queries, keys, seed, true)
}

/// [`cotangent`], or with `causal` false one on every pair (keys after the query too).
fn cotangent_on(
    heads: usize,
    queries: &[Position],
    keys: &[Position],
    seed: u64,
    causal: bool,
) -> (Vec<f32>, fire_reference::Bias) {
    let (nq, nk) = (queries.len(), keys.len());
    let mut g = random(heads * nq * nk, seed);
    for h in (0..heads).filter(|_| causal) {
        for (q, &i) in queries.iter().enumerate() {
            for (k, &j) in keys.iter().enumerate() {
                if j > i {
                    g[(h * nq + q) * nk + k] = 0.0;
                }
            }
        }
    }
    let mats = (0..heads)
        .map(|h| DMatrix::from_fn(nq, nk, |q, k| f64::from(g[(h * nq + q) * nk + k])))
        .collect();
    (g, fire_reference::Bias::from_heads(mats).unwrap())
}

fn assert_close(label: &str, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{label}: lengths");
    let scale = want.iter().fold(0f64, |a, v| a.max(v.abs()));
    for (n, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-4 * scale.max(w.abs()) + 1e-9,
            "{label}: entry {n} of {}: {g} vs reference {w} (scale {scale})",
            got.len()
        );
    }
}

#[test]
fn fire_bias_gradient_equals_the_reference_vjp() {
    let gapped: Vec<Position> = (0..70).map(|t| t * 3 / 2).collect();
    let contiguous: Vec<Position> = (0..70).collect();
    for depth in [1, 2] {
        for positions in [&contiguous, &gapped] {
            // L = 512·m = 20 exactly: rows below, on and above the threshold.
            let (reference, mlp, params) = fire_pair(3, 8, depth, 11 + depth as u64, 20.0 / 512.0);
            let (g, g_ref) = cotangent(3, positions, positions, 5);
            let want = fire_reference::fire::grad::vjp(&reference, positions, positions, &g_ref)
                .unwrap()
                .to_flat();
            for (label, fire) in [
                ("compiled", FireBias::new(mlp.clone(), params, 128).unwrap()),
                (
                    "direct",
                    FireBias::direct(mlp.clone(), params, 128).unwrap(),
                ),
            ] {
                let plan = fire.grad_plan(positions, positions).unwrap();
                let n = positions.len();
                // Uneven tiles, as the kernel might cut them.
                let tiles = [(0..37, 0..n), (37..n, 0..20), (37..n, 20..n)];
                let got = tiled_gradient(plan.as_ref(), &g, 3, n, &tiles);
                let gaps = if positions == &gapped {
                    "gapped"
                } else {
                    "contiguous"
                };
                assert_close(&format!("depth {depth}, {gaps}, {label}"), &got, &want);
            }
        }
    }
}

/// A cotangent on keys after the query too (what a non-causal caller of the plan may hand
/// it): those pairs take the pair-by-pair path at the distance of [conv.future], found only
/// where a row's tail of the tile is not all zero.
#[test]
fn fire_bias_gradient_with_future_keys_equals_the_reference_vjp() {
    let positions: Vec<Position> = (0..50).collect();
    let (reference, mlp, params) = fire_pair(3, 8, 1, 29, 20.0 / 512.0);
    let (g, g_ref) = cotangent_on(3, &positions, &positions, 7, false);
    let want = fire_reference::fire::grad::vjp(&reference, &positions, &positions, &g_ref)
        .unwrap()
        .to_flat();
    let fire = FireBias::new(mlp, params, 128).unwrap();
    let plan = fire.grad_plan(&positions, &positions).unwrap();
    let n = positions.len();
    let tiles = [(0..23, 0..n), (23..n, 0..31), (23..n, 31..n)];
    let got = tiled_gradient(plan.as_ref(), &g, 3, n, &tiles);
    assert_close("future keys", &got, &want);
}

/// `plan`'s gradient from the cotangent `g` (`[heads, n, n]`) handed over tile by tile.
fn tiled_gradient(
    plan: &dyn GradPlan,
    g: &[f32],
    heads: usize,
    n: usize,
    tiles: &[(Range<usize>, Range<usize>)],
) -> Vec<f64> {
    let mut stats = vec![0f64; plan.stats_len()];
    for h in 0..heads {
        for (rows, cols) in tiles {
            let tile: Vec<f32> = rows
                .clone()
                .flat_map(|q| cols.clone().map(move |k| (q, k)))
                .map(|(q, k)| g[(h * n + q) * n + k])
                .collect();
            plan.accumulate(h, rows.clone(), cols.clone(), &tile, cols.len(), &mut stats);
        }
    }
    plan.gradient(&stats).unwrap()
}

#[test]
fn distance_table_gradient_is_the_cotangent_summed_per_distance() {
    let positions: Vec<Position> = (0..40).collect();
    let table = DistanceTable::new(2, 40, random(80, 3)).unwrap();
    let (g, _) = cotangent(2, &positions, &positions, 9);
    let plan = table.grad_plan(&positions, &positions).unwrap();
    let mut stats = vec![0f64; plan.stats_len()];
    for h in 0..2 {
        plan.accumulate(
            h,
            0..40,
            0..40,
            &g[h * 1600..(h + 1) * 1600],
            40,
            &mut stats,
        );
    }
    let got = plan.gradient(&stats).unwrap();
    let mut want = vec![0f64; 80];
    for h in 0..2 {
        for i in 0..40 {
            for j in 0..=i {
                want[h * 40 + i - j] += f64::from(g[(h * 40 + i) * 40 + j]);
            }
        }
    }
    assert_close("table", &got, &want);
    // A table too short for the positions is an error, not an out-of-bounds read.
    let short = DistanceTable::new(2, 10, random(20, 3)).unwrap();
    assert!(short.grad_plan(&positions, &positions).is_err());
}

/// The same sums through tiles of odd sizes, for a chunk of queries against a longer cache,
/// with a cotangent on every pair (keys after the query too, at `|i − j|`): contiguous keys
/// take the reversed-row path, every other key list the pair-by-pair one.
#[test]
fn distance_table_gradient_over_tiles_with_future_keys() {
    let table = DistanceTable::new(3, 100, random(300, 5)).unwrap();
    let sparse: Vec<Position> = (0..90).step_by(3).collect();
    for (queries, keys) in [
        (
            (30..70).collect::<Vec<Position>>(),
            (0..80).collect::<Vec<Position>>(),
        ),
        ((0..40).rev().collect(), (0..40).collect()),
        ((40..70).collect(), sparse),
    ] {
        let (nq, nk) = (queries.len(), keys.len());
        let g = random(3 * nq * nk, 11);
        let plan = table.grad_plan(&queries, &keys).unwrap();
        let mut stats = vec![0f64; plan.stats_len()];
        for h in 0..3 {
            for r0 in (0..nq).step_by(13) {
                for c0 in (0..nk).step_by(29) {
                    let (r1, c1) = ((r0 + 13).min(nq), (c0 + 29).min(nk));
                    let mut tile = vec![f32::NAN; (r1 - r0) * 31];
                    for r in r0..r1 {
                        for c in c0..c1 {
                            tile[(r - r0) * 31 + c - c0] = g[(h * nq + r) * nk + c];
                        }
                    }
                    plan.accumulate(h, r0..r1, c0..c1, &tile, 31, &mut stats);
                }
            }
        }
        let got = plan.gradient(&stats).unwrap();
        let mut want = vec![0f64; 300];
        for h in 0..3 {
            for (r, &i) in queries.iter().enumerate() {
                for (c, &j) in keys.iter().enumerate() {
                    want[h * 100 + i.abs_diff(j) as usize] += f64::from(g[(h * nq + r) * nk + c]);
                }
            }
        }
        assert_close("table over tiles", &got, &want);
    }
}

#[test]
fn backward_rejects_mismatched_buffers() {
    let shape = Shape {
        heads: 2,
        queries: 4,
        keys: 4,
        head_dim: 3,
    };
    let pos: Vec<Position> = (0..4).collect();
    let x = random(24, 1);
    let ok = fused_causal_backward(1, &x, &x, &x, &x, &[0.0; 8], &x, shape, &pos, &pos, None);
    assert!(ok.is_ok());
    let short_lse =
        fused_causal_backward(1, &x, &x, &x, &x, &[0.0; 7], &x, shape, &pos, &pos, None);
    assert!(short_lse.unwrap_err().to_string().contains("lse"));
    let wrong_batch =
        fused_causal_backward(2, &x, &x, &x, &x, &[0.0; 8], &x, shape, &pos, &pos, None);
    assert!(wrong_batch.is_err());
}

/// The merged-rows variant writes exactly `fused_causal_backward`'s `dq`, `dk`, `dv`, bit for
/// bit, each head's `d` values at its column of its gradient's block, into every row of every
/// batch row, leaves the other columns alone, and returns the same bias gradient.
#[test]
fn merged_rows_hold_the_split_gradients_bit_for_bit() {
    use crate::attention::fused_causal_lse_batch;
    use crate::backward::{fused_causal_backward_into_rows, BackwardInputs, MergedRows};
    let (batch, heads, n, d) = (2, 3, 37, 4);
    let shape = Shape {
        heads,
        queries: n,
        keys: n,
        head_dim: d,
    };
    let pos: Vec<Position> = (0..n as Position).collect();
    let len = batch * heads * n * d;
    let [q, k, v, dout] = attention_inputs(len);
    let (_, mlp, params) = fire_pair(heads, 8, 1, 5, 20.0 / 512.0);
    let fire = FireBias::new(mlp, params, n).unwrap();
    let plan = fire.grad_plan(&pos, &pos).unwrap();
    let (out, lse) =
        fused_causal_lse_batch(batch, &q, &k, &v, shape, &pos, &pos, Some(plan.as_bias())).unwrap();
    let split = fused_causal_backward(
        batch,
        &q,
        &k,
        &v,
        &out,
        &lse,
        &dout,
        shape,
        &pos,
        &pos,
        Some(plan.as_ref()),
    )
    .unwrap();
    // Rows wider than the three gradients, in another order, with a gap and a tail.
    let (width, offsets) = (3 * heads * d + 5, [2 * heads * d + 3, 0, heads * d + 1]);
    let mut rows = vec![-7.0f32; batch * n * width];
    let dparams = fused_causal_backward_into_rows(
        BackwardInputs {
            batch,
            q: &q,
            k: &k,
            v: &v,
            out: &out,
            lse: &lse,
            dout: &dout,
            shape,
            queries: &pos,
            keys: &pos,
            bias: Some(plan.as_ref()),
        },
        MergedRows {
            rows: &mut rows,
            width,
            offsets,
        },
    )
    .unwrap();
    assert_eq!(dparams, split.dparams);
    let mut written = vec![false; width];
    for (g, &offset) in [&split.dq, &split.dk, &split.dv].into_iter().zip(&offsets) {
        for b in 0..batch {
            for h in 0..heads {
                for i in 0..n {
                    let want = &g[((b * heads + h) * n + i) * d..][..d];
                    let at = (b * n + i) * width + offset + h * d;
                    assert_eq!(&rows[at..at + d], want, "batch {b}, head {h}, row {i}");
                }
            }
        }
        written[offset..offset + heads * d].fill(true);
    }
    for (c, _) in written.iter().enumerate().filter(|(_, w)| !**w) {
        assert!(
            rows.iter().skip(c).step_by(width).all(|&x| x == -7.0),
            "column {c}"
        );
    }
}

#[test]
fn merged_rows_refuse_what_they_cannot_hold() {
    use crate::backward::{fused_causal_backward_into_rows, BackwardInputs, MergedRows};
    let shape = Shape {
        heads: 2,
        queries: 4,
        keys: 4,
        head_dim: 3,
    };
    let pos: Vec<Position> = (0..4).collect();
    let (x, k2) = (random(24, 1), random(12, 2));
    let inputs = BackwardInputs {
        batch: 1,
        q: &x,
        k: &x,
        v: &x,
        out: &x,
        lse: &[0.0; 8],
        dout: &x,
        shape,
        queries: &pos,
        keys: &pos,
        bias: None,
    };
    let run = |inputs, rows: &mut [f32], width: usize, offsets: [usize; 3]| {
        let dst = MergedRows {
            rows,
            width,
            offsets,
        };
        fused_causal_backward_into_rows(inputs, dst).map_err(|e| e.to_string())
    };
    assert!(run(inputs, &mut [0.0; 72], 18, [0, 6, 12]).is_ok());
    let past_the_row = run(inputs, &mut [0.0; 72], 18, [0, 6, 13]).unwrap_err();
    assert!(past_the_row.contains("width"), "{past_the_row}");
    let short = run(inputs, &mut [0.0; 71], 18, [0, 6, 12]).unwrap_err();
    assert!(short.contains("merged rows"), "{short}");
    let cross = BackwardInputs {
        k: &k2,
        v: &k2,
        shape: Shape { keys: 2, ..shape },
        keys: &pos[..2],
        ..inputs
    };
    let not_self = run(cross, &mut [0.0; 72], 18, [0, 6, 12]).unwrap_err();
    assert!(not_self.contains("self-attention"), "{not_self}");
}

/// `dq`, `dk`, `dv` and a distance table's gradient over a sequence several of the backward's
/// key blocks long (d = 256: blocks of 128 keys; 300 positions end in a partial block and a
/// partial tile) against the attention backpropagated in f64, softmax by softmax: the sweep
/// block by block reaches every visible pair exactly once. Contiguous and gapped positions.
#[test]
fn the_gradients_over_several_key_blocks_equal_a_materialised_twin() {
    use crate::attention::fused_causal_lse;
    let (heads, n, d) = (2, 300, 256);
    assert!(crate::backward::key_block(d) * 2 < n);
    let shape = Shape {
        heads,
        queries: n,
        keys: n,
        head_dim: d,
    };
    let (q, k, v) = (
        random(heads * n * d, 1),
        random(heads * n * d, 2),
        random(heads * n * d, 3),
    );
    let dout = random(heads * n * d, 4);
    let contiguous: Vec<Position> = (0..n as Position).collect();
    let gapped: Vec<Position> = (0..n as Position).map(|t| t * 3 / 2).collect();
    for positions in [&contiguous, &gapped] {
        let capacity = *positions.last().unwrap() as usize + 1;
        let values = random(heads * capacity, 5);
        let table = DistanceTable::new(heads, capacity, values.clone()).unwrap();
        let plan = table.grad_plan(positions, positions).unwrap();
        let (out, lse) = fused_causal_lse(
            &q,
            &k,
            &v,
            shape,
            positions,
            positions,
            Some(plan.as_bias()),
        )
        .unwrap();
        let got = fused_causal_backward(
            1,
            &q,
            &k,
            &v,
            &out,
            &lse,
            &dout,
            shape,
            positions,
            positions,
            Some(plan.as_ref()),
        )
        .unwrap();
        let bias =
            |h: usize, i: Position, j: Position| f64::from(values[h * capacity + (i - j) as usize]);
        let want = materialised_backward(&q, &k, &v, &dout, heads, d, positions, bias);
        let widen = |x: &[f32]| x.iter().map(|&v| f64::from(v)).collect::<Vec<_>>();
        let label = if positions == &gapped {
            "gapped"
        } else {
            "contiguous"
        };
        assert_close(&format!("dq, {label}"), &widen(&got.dq), &want.0);
        assert_close(&format!("dk, {label}"), &widen(&got.dk), &want.1);
        assert_close(&format!("dv, {label}"), &widen(&got.dv), &want.2);
        // The table's gradient: dS summed per distance.
        let mut per_distance = vec![0f64; heads * capacity];
        for h in 0..heads {
            for (r, &i) in positions.iter().enumerate() {
                for (c, &j) in positions.iter().enumerate().take(r + 1) {
                    per_distance[h * capacity + (i - j) as usize] += want.3[(h * n + r) * n + c];
                }
            }
        }
        assert_close(&format!("table, {label}"), &got.dparams, &per_distance);
    }
}

/// Causal attention `softmax(q·kᵀ/√d + b)·v` backpropagated in f64 from `dout`, head by head:
/// `(dq, dk, dv, dS)`, the last `[H, N, N]`.
#[allow(clippy::too_many_arguments)]
fn materialised_backward(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    dout: &[f32],
    heads: usize,
    d: usize,
    positions: &[Position],
    bias: impl Fn(usize, Position, Position) -> f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) {
    let n = positions.len();
    let at = |x: &[f32], h: usize, r: usize| -> Vec<f64> {
        x[(h * n + r) * d..(h * n + r + 1) * d]
            .iter()
            .map(|&v| f64::from(v))
            .collect()
    };
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    let scale = 1.0 / (d as f64).sqrt();
    let (mut dq, mut dk, mut dv) = (
        vec![0f64; heads * n * d],
        vec![0f64; heads * n * d],
        vec![0f64; heads * n * d],
    );
    let mut ds_all = vec![0f64; heads * n * n];
    for h in 0..heads {
        for r in 0..n {
            let (qr, dor) = (at(q, h, r), at(dout, h, r));
            let visible = 0..=r;
            let s: Vec<f64> = visible
                .clone()
                .map(|c| dot(&qr, &at(k, h, c)) * scale + bias(h, positions[r], positions[c]))
                .collect();
            let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
            let p: Vec<f64> = s.iter().map(|x| (x - m).exp() / z).collect();
            let dp: Vec<f64> = visible.clone().map(|c| dot(&dor, &at(v, h, c))).collect();
            let big_d: f64 = p.iter().zip(&dp).map(|(a, b)| a * b).sum();
            for c in visible {
                let ds = p[c] * (dp[c] - big_d);
                ds_all[(h * n + r) * n + c] = ds;
                let (kc, base_r, base_c) = (at(k, h, c), (h * n + r) * d, (h * n + c) * d);
                for e in 0..d {
                    dq[base_r + e] += ds * kc[e] * scale;
                    dk[base_c + e] += ds * qr[e] * scale;
                    dv[base_c + e] += p[c] * dor[e];
                }
            }
        }
    }
    (dq, dk, dv, ds_all)
}
