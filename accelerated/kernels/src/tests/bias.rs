use fire_vocabulary::SplitMix64;

use fire_vocabulary::{Activation, Position};

use super::{fire_pair, max_diff};
use crate::baselines::{alibi_slopes, t5_bucket, DistanceBias, DistanceEncoding};
use crate::fire::{FireBias, FireFunction};
use crate::materialised;
use crate::mlp::{Linear, Mlp};
use crate::table::DistanceTable;
use crate::tile::{TileBias, SPLIT_BLOCK};

/// The reference's `[H, Q, K]` bias as f32.
fn reference_bias(f: &fire_reference::Fire, queries: &[Position], keys: &[Position]) -> Vec<f32> {
    fire_reference::evaluate(f, queries, keys)
        .unwrap()
        .to_row_major()
        .into_iter()
        .map(|v| v as f32)
        .collect()
}

/// The fast source's bias through tiles of odd sizes (so rows and columns start mid-list).
fn tiled(bias: &dyn TileBias, queries: &[Position], keys: &[Position]) -> Vec<f32> {
    let plan = bias.plan(queries, keys).unwrap();
    let (nq, nk) = (queries.len(), keys.len());
    let mut out = vec![f32::NAN; bias.heads() * nq * nk];
    for h in 0..bias.heads() {
        for r0 in (0..nq).step_by(13) {
            for c0 in (0..nk).step_by(29) {
                let (r1, c1) = ((r0 + 13).min(nq), (c0 + 29).min(nk));
                let mut tile = vec![f32::NAN; (r1 - r0) * 31];
                plan.fill(h, r0..r1, c0..c1, &mut tile, 31);
                for r in r0..r1 {
                    for c in c0..c1 {
                        out[(h * nq + r) * nk + c] = tile[(r - r0) * 31 + c - c0];
                    }
                }
            }
        }
    }
    out
}

fn position_cases() -> Vec<(Vec<Position>, Vec<Position>)> {
    let mut rng = SplitMix64::new(5);
    let mut sparse: Vec<Position> = (0..90).map(|_| rng.next_u64() % 3000).collect();
    sparse.sort_unstable();
    let scattered: Vec<Position> = (0..40).map(|_| rng.next_u64() % 3000).collect();
    vec![
        // Prefill: the same contiguous list, crossing L.
        ((0..150).collect(), (0..150).collect()),
        // A chunk of queries against a longer cache (keys after the query included).
        ((100..140).collect(), (0..170).collect()),
        // Long distances, past the ψ table's capacity.
        ((2900..2930).collect(), (0..3000).step_by(7).collect()),
        // Non-contiguous keys and unsorted queries.
        (scattered, sparse),
    ]
}

#[test]
fn compiled_fire_tiles_match_the_reference_and_the_materialised_mlp() {
    for depth in [1, 2] {
        for seed in 0..3 {
            // L = 512·0.1 = 51.2: the cases cross the threshold.
            let (f, mlp, params) = fire_pair(12, 32, depth, seed, 0.1);
            let fast = FireBias::new(mlp.clone(), params, 1000).unwrap();
            for (queries, keys) in position_cases() {
                let want = reference_bias(&f, &queries, &keys);
                let got = tiled(&fast, &queries, &keys);
                let slow = materialised::fire_bias(&mlp, &params, &queries, &keys).unwrap();
                let scale = want.iter().fold(1.0f32, |m, v| m.max(v.abs()));
                assert!(
                    max_diff(&want, &got) <= 2e-5 * scale,
                    "depth {depth}: fast vs reference"
                );
                assert!(
                    max_diff(&want, &slow) <= 2e-5 * scale,
                    "depth {depth}: slow vs reference"
                );
                assert!(max_diff(&got, &slow) <= 2e-5 * scale);
            }
        }
    }
}

/// A causal tile holds the bias of every pair whose key is not after its query, exactly as the
/// general fill writes it (the kernel masks the rest), whatever the tile's position: tiles of
/// odd sizes over prefill, a chunk against a longer cache, distances past the ψ table with
/// contiguous keys (entry by entry) and sparse keys. So do the rows handed back as affine in
/// the ψ table, which must read inside it over the tile's whole stride.
/// The count of thresholds a row has crossed at a distance is the same from any starting
/// hint (the fill and the gradient step it from the previous row's), and the thresholds the
/// plan keeps per row include every one a causal pair of that row can reach.
#[test]
fn threshold_crossings_do_not_depend_on_the_hint() {
    let (_, mlp, params) = fire_pair(3, 32, 1, 4, 0.1);
    let fire = FireBias::new(mlp, params, 400).unwrap();
    let positions: Vec<Position> = (30..330).collect();
    let plan = fire.fire_plan(&positions, &positions).unwrap();
    let mut crossing_rows = 0;
    for (q, &i) in positions.iter().enumerate() {
        let all = plan.thresholds_of(q);
        let longest = (i - positions[0]) as usize;
        for nhi in 0..=longest {
            let want = all.partition_point(|&t| t as usize <= nhi);
            for hint in 0..=all.len() + 1 {
                assert_eq!(
                    plan.crossed(q, nhi, hint),
                    want,
                    "query {i}, distance {nhi}, hint {hint}"
                );
            }
        }
        crossing_rows += usize::from(plan.crossed(q, longest, 0) > 0);
    }
    assert!(
        crossing_rows > 200,
        "only {crossing_rows} rows cross a breakpoint"
    );
}

/// Each row's distance thresholds are the first distance whose x, in the kernel's f32
/// arithmetic, reaches each breakpoint in (0, 1] — found on rayon's threads, each search
/// started from the previous query's answers — for queries in any order, repeated, below and
/// above the threshold L, and nearer the table's end than any threshold.
#[test]
fn distance_thresholds_are_the_first_distance_reaching_each_breakpoint() {
    let (_, mlp, params) = fire_pair(3, 32, 1, 4, 0.1);
    let m = 700;
    let fire = FireBias::new(mlp, params, m).unwrap();
    let FireFunction::Compiled(pl) = fire.function() else {
        panic!("a ReLU f_θ compiles");
    };
    let bps = pl.breakpoints();
    let first = pl.segment(0.0);
    let bps = &bps[first..first + bps[first..].partition_point(|&t| t <= 1.0)];
    assert!(bps.len() >= 5, "only {} breakpoints in (0, 1]", bps.len());
    let mut rng = SplitMix64::new(3);
    let ascending: Vec<Position> = (0..m as Position).collect();
    let descending: Vec<Position> = ascending.iter().rev().copied().collect();
    // Queries past the table as well (their x stays below the last breakpoints within it).
    let scattered: Vec<Position> = (0..900).map(|_| rng.below(3 * m as u64)).collect();
    let keys: Vec<Position> = (0..3 * m as Position).collect();
    let mut past_the_table = 0;
    for queries in [ascending, descending, scattered] {
        let plan = fire.fire_plan(&queries, &keys).unwrap();
        for (q, &i) in queries.iter().enumerate() {
            let inv = (1.0 / params.normaliser(i as f64)) as f32;
            for (k, &t) in bps.iter().enumerate() {
                let want = (0..m)
                    .find(|&n| f64::from(fire.psi(n as u64) * inv) >= t)
                    .unwrap_or(m);
                past_the_table += usize::from(want == m);
                assert_eq!(
                    plan.thresholds_of(q)[k] as usize,
                    want,
                    "query {i}, breakpoint {t}"
                );
            }
        }
    }
    assert!(
        past_the_table > 100,
        "{past_the_table} thresholds past the table"
    );
}

#[test]
fn causal_tiles_equal_the_general_fill_on_visible_pairs() {
    let (_, mlp, params) = fire_pair(6, 32, 1, 4, 0.1);
    let random = FireBias::new(mlp, params, 1000).unwrap();
    // f_θ with no breakpoint in (0, 1] (ReLU(w·x + b) with b > 2|w|): every causal row is one
    // segment, up to the diagonal, where the handed-back rows meet the end of the ψ table.
    let mut rng = SplitMix64::new(17);
    let w: Vec<f64> = (0..32).map(|_| rng.normal()).collect();
    let b: Vec<f64> = w.iter().map(|w| 2.0 * w.abs() + 0.1).collect();
    let out: Vec<f64> = (0..6 * 32).map(|_| rng.normal()).collect();
    let layers = vec![
        Linear::new(w, b, 1, 32).unwrap(),
        Linear::new(out, vec![0.25; 6], 32, 6).unwrap(),
    ];
    let straight = Mlp::new(layers, Activation::Relu, None).unwrap();
    let straight = FireBias::new(straight, params, 1000).unwrap();
    // A distance table (Kerple-log's form, −0 at distance 0) over every distance of the cases.
    let values: Vec<f32> = (0..6 * 3200)
        .map(|k| -0.3 * (1.0 + 0.1 * (k % 3200) as f32).ln())
        .collect();
    assert!(values[0].to_bits() == (-0.0f32).to_bits());
    let table = DistanceTable::new(6, 3200, values).unwrap();
    let mut cases = position_cases();
    cases.push(((1100..1160).collect(), (0..1160).collect()));
    let (mut affine_rows, mut split_rows, mut whole_blocks) = (0, 0, 0);
    let sources: [&dyn TileBias; 3] = [&random, &straight, &table];
    for (fast, (queries, keys)) in sources
        .into_iter()
        .flat_map(|f| cases.iter().map(move |c| (f, c)))
    {
        let plan = fast.plan(queries, keys).unwrap();
        let (nq, nk) = (queries.len(), keys.len());
        // Tiles narrower than their stride, as wide (where a row handed back reaches the
        // diagonal, distance 0), and the forward kernel's 128 (a two-piece row's whole
        // `SPLIT_BLOCK` around its split written in vectors).
        let shapes = [(29, 31), (31, 31), (128, 128)];
        for (h, (width, stride)) in (0..fast.heads()).flat_map(|h| shapes.map(|s| (h, s))) {
            for r0 in (0..nq).step_by(13) {
                for c0 in (0..nk).step_by(width) {
                    let (r1, c1) = ((r0 + 13).min(nq), (c0 + width).min(nk));
                    let mut general = vec![f32::NAN; (r1 - r0) * stride];
                    let mut causal = general.clone();
                    let mut handed = general.clone();
                    let mut affine = vec![None; r1 - r0];
                    plan.fill(h, r0..r1, c0..c1, &mut general, stride);
                    plan.fill_causal(h, r0..r1, c0..c1, &mut causal, stride);
                    let table = plan.fill_causal_affine(
                        h,
                        r0..r1,
                        c0..c1,
                        &mut handed,
                        stride,
                        &mut affine,
                    );
                    for (r, &i) in queries[r0..r1].iter().enumerate() {
                        let vis = keys[c0..c1].iter().filter(|&&j| j <= i).count();
                        if let Some(row) = affine[r] {
                            // The whole stride reads inside the table.
                            assert!(row.offset + stride <= table.len());
                            affine_rows += 1;
                            split_rows += usize::from(row.split < stride);
                            whole_blocks += usize::from(row.written(vis).len() == SPLIT_BLOCK);
                        }
                        for (c, &j) in keys[c0..c1].iter().enumerate().filter(|(_, &j)| j <= i) {
                            let at = r * stride + c;
                            let want = general[at].to_bits();
                            let msg = format!("head {h}, query {i}, key {j}");
                            assert_eq!(causal[at].to_bits(), want, "{msg}");
                            let got = affine[r].map_or(handed[at], |row| row.at(table, c));
                            assert_eq!(got.to_bits(), want, "{msg}, rows handed back");
                            // The block around a split is written out as well.
                            if affine[r].is_some_and(|row| row.written(vis).contains(&c)) {
                                assert_eq!(handed[at].to_bits(), want, "{msg}, split block");
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(
        affine_rows > 100,
        "only {affine_rows} rows were handed back"
    );
    assert!(
        split_rows > 20,
        "only {split_rows} rows were handed back in two pieces"
    );
    assert!(
        whole_blocks > 20,
        "only {whole_blocks} two-piece rows had their whole block written"
    );
}

#[test]
fn gelu_fire_falls_back_to_direct_evaluation() {
    let (mut f, mut mlp, params) = fire_pair(4, 16, 1, 9, 0.1);
    f.mlp.activation = fire_reference::fire::Activation::Gelu;
    mlp.activation = Activation::Gelu;
    let fast = FireBias::new(mlp, params, 64).unwrap();
    assert!(matches!(
        fast.function(),
        crate::fire::FireFunction::Direct(_)
    ));
    for (queries, keys) in position_cases().into_iter().take(2) {
        let want = reference_bias(&f, &queries, &keys);
        let got = tiled(&fast, &queries, &keys);
        assert!(max_diff(&want, &got) <= 1e-5);
    }
}

#[test]
fn bad_keys_and_parameters_are_errors() {
    let (_, mlp, mut params) = fire_pair(4, 8, 1, 1, 1.0);
    let fast = FireBias::new(mlp.clone(), params, 16).unwrap();
    assert!(fast.plan(&[3], &[2, 1]).is_err());
    assert!(fast.plan(&[3], &[]).is_err());
    params.l_init = -1.0;
    assert!(FireBias::new(mlp, params, 16).is_err());
}

fn baseline_cases(heads: usize) -> Vec<DistanceEncoding> {
    let mut rng = SplitMix64::new(17);
    let mut draw =
        |n: usize, lo: f64, hi: f64| -> Vec<f64> { (0..n).map(|_| rng.uniform(lo, hi)).collect() };
    vec![
        DistanceEncoding::Nope,
        DistanceEncoding::Alibi {
            slopes: alibi_slopes(heads),
        },
        DistanceEncoding::KerpleLog {
            r1: draw(heads, 0.01, 2.0),
            r2: draw(heads, 0.01, 1.0),
        },
        DistanceEncoding::KerplePower {
            r1: draw(heads, 0.01, 1.0),
            r2: draw(heads, 0.01, 2.0),
        },
        DistanceEncoding::T5 {
            buckets: 32,
            max_distance: 128,
            table: draw(heads * 32, -1.0, 1.0),
        },
        DistanceEncoding::Sandwich { heads, dim: 64 },
    ]
}

#[test]
fn baseline_tiles_equal_their_formula() {
    let heads = 12;
    for enc in baseline_cases(heads) {
        let fast = DistanceBias::new(enc.clone(), heads, 500).unwrap();
        for (queries, keys) in position_cases() {
            let got = tiled(&fast, &queries, &keys);
            let (nq, nk) = (queries.len(), keys.len());
            for h in 0..heads {
                for (r, &i) in queries.iter().enumerate() {
                    for (c, &j) in keys.iter().enumerate() {
                        let n = if j <= i {
                            i - j
                        } else if matches!(enc, DistanceEncoding::T5 { .. }) {
                            0
                        } else {
                            j - i
                        };
                        let want = enc.value(h, n) as f32;
                        let g = got[(h * nq + r) * nk + c];
                        assert!((want - g).abs() <= 1e-5 * (1.0 + want.abs()), "{enc:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn alibi_slopes_and_t5_buckets_follow_the_official_code() {
    let s = alibi_slopes(12);
    let want: Vec<f64> = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 0.5, 1.5, 2.5, 3.5]
        .iter()
        .map(|e| 2f64.powf(-e))
        .collect();
    for (a, b) in s.iter().zip(&want) {
        assert!((a - b).abs() < 1e-15);
    }
    assert_eq!(alibi_slopes(8).len(), 8);
    assert_eq!(t5_bucket(0, 32, 128), 0);
    assert_eq!(t5_bucket(15, 32, 128), 15);
    // 16 + floor(ln(2)/ln(8)·16) = 16 + 5.
    assert_eq!(t5_bucket(32, 32, 128), 21);
    assert_eq!(t5_bucket(127, 32, 128), 31);
    assert_eq!(t5_bucket(100_000, 32, 128), 31);
    // Where binary32 and binary64 disagree ([t5.bucket.official.float]): t(10) is 1 in f32,
    // 0.999… in f64.
    assert_eq!(t5_bucket(10, 10, 160), 6);
}
