use nalgebra::DMatrix;

use fire_vocabulary::Position;

use super::{fire_pair, max_diff, random};
use crate::attention::{
    attend, decode, fused_causal, fused_causal_lse, fused_causal_lse_batch, Shape,
};
use crate::baselines::{alibi_slopes, DistanceBias, DistanceEncoding};
use crate::fire::FireBias;
use crate::materialised;
use crate::tile::TileBias;

struct Case {
    shape: Shape,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    queries: Vec<Position>,
    keys: Vec<Position>,
}

fn case(heads: usize, queries: Vec<Position>, keys: Vec<Position>, d: usize, seed: u64) -> Case {
    let shape = Shape {
        heads,
        queries: queries.len(),
        keys: keys.len(),
        head_dim: d,
    };
    Case {
        q: random(heads * queries.len() * d, seed)
            .iter()
            .map(|x| 3.0 * x)
            .collect(),
        k: random(heads * keys.len() * d, seed + 1)
            .iter()
            .map(|x| 3.0 * x)
            .collect(),
        v: random(heads * keys.len() * d, seed + 2),
        shape,
        queries,
        keys,
    }
}

fn fast(c: &Case, e: Option<&dyn TileBias>) -> Vec<f32> {
    attend(&c.q, &c.k, &c.v, c.shape, &c.queries, &c.keys, e).unwrap()
}

fn slow(c: &Case, e: Option<&dyn TileBias>) -> Vec<f32> {
    let b = e.map(|e| materialised::bias(e, &c.queries, &c.keys).unwrap());
    materialised::attention(&c.q, &c.k, &c.v, c.shape, &c.queries, &c.keys, b.as_deref()).unwrap()
}

/// The reference's causal attention (f64) over a given `[H, Q, K]` bias.
fn reference(c: &Case, bias: &fire_reference::Bias) -> Vec<f32> {
    let Shape {
        heads,
        queries: nq,
        keys: nk,
        head_dim: d,
    } = c.shape;
    let m = |x: &[f32], rows: usize, h: usize| {
        DMatrix::from_fn(rows, d, |r, col| f64::from(x[(h * rows + r) * d + col]))
    };
    let inputs: Vec<_> = (0..heads)
        .map(|h| fire_reference::attention::HeadInputs {
            q: m(&c.q, nq, h),
            k: m(&c.k, nk, h),
            v: m(&c.v, nk, h),
        })
        .collect();
    let out = fire_reference::attention::causal(
        &inputs,
        bias,
        &c.queries,
        &c.keys,
        fire_reference::attention::Placement::AfterScaling,
    )
    .unwrap();
    out.iter()
        .flat_map(|o| (0..o.nrows()).flat_map(move |r| (0..d).map(move |col| o[(r, col)] as f32)))
        .collect()
}

#[test]
fn fused_fire_equals_the_reference_and_the_materialised_path() {
    for depth in [1, 2] {
        let (f, mlp, params) = fire_pair(4, 32, depth, 21 + depth as u64, 0.2);
        let fire = FireBias::new(mlp, params, 400).unwrap();
        // N not a multiple of the tile; a query chunk against a longer cache.
        for (queries, keys) in [
            ((0..150).collect::<Vec<_>>(), (0..150).collect::<Vec<_>>()),
            ((130..203).collect(), (0..203).collect()),
        ] {
            let c = case(4, queries, keys, 24, 40 + depth as u64);
            let got = fast(&c, Some(&fire));
            let twin = slow(&c, Some(&fire));
            let bias = fire_reference::evaluate(&f, &c.queries, &c.keys).unwrap();
            let want = reference(&c, &bias);
            assert!(
                max_diff(&got, &want) < 2e-5,
                "fused vs reference (depth {depth})"
            );
            assert!(max_diff(&twin, &want) < 2e-5, "materialised vs reference");
        }
    }
}

/// Several query and key tiles, head dimensions that take each register block (the 16-lane
/// value blocks of 4 × 64 and 8 × 32, the 16-wide ones with a remainder), query orders that do
/// and do not allow skipping the row blocks that see no key of a tile, all against the
/// materialised twin.
#[test]
fn fused_attention_over_many_tiles_and_blocks_equals_the_twin() {
    use crate::attention::{TILE_K, TILE_Q};
    let n = 2 * TILE_Q.max(TILE_K) + 37;
    let alibi = DistanceBias::new(
        DistanceEncoding::Alibi {
            slopes: alibi_slopes(2),
        },
        2,
        n + 1,
    )
    .unwrap();
    for d in [64, 32, 40] {
        let sorted: Vec<Position> = (0..n as Position).collect();
        let mut shuffled = sorted.clone();
        shuffled.reverse();
        shuffled.swap(3, n / 2);
        for queries in [
            sorted.clone(),
            shuffled,
            (n as Position / 2..n as Position).collect(),
        ] {
            let c = case(2, queries, sorted.clone(), d, 70 + d as u64);
            // Both sides sum up to n terms in f32, in different orders: rounding grows like
            // √n ulps (2·10⁻⁶ at the 293 keys of 128-wide tiles, 3.9·10⁻⁶ at 1 061).
            let tol = f32::EPSILON * (n as f32).sqrt();
            for e in [None, Some(&alibi as &dyn TileBias)] {
                let got = fast(&c, e);
                let want = slow(&c, e);
                assert!(
                    max_diff(&got, &want) < tol,
                    "d {d}, bias {}: {}",
                    e.is_some(),
                    max_diff(&got, &want)
                );
            }
        }
    }
}

#[test]
fn fused_nope_equals_no_bias_and_zero_bias() {
    let c = case(3, (0..97).collect(), (0..97).collect(), 64, 3);
    let nope = DistanceBias::new(DistanceEncoding::Nope, 3, 128).unwrap();
    let none = fast(&c, None);
    let zero = fast(&c, Some(&nope));
    let want = slow(&c, None);
    assert!(max_diff(&none, &want) < 2e-6);
    assert!(max_diff(&zero, &want) < 2e-6);
    // And the bias matters: Alibi changes the result.
    let alibi = DistanceBias::new(
        DistanceEncoding::Alibi {
            slopes: alibi_slopes(3),
        },
        3,
        128,
    )
    .unwrap();
    let a = fast(&c, Some(&alibi));
    assert!(max_diff(&a, &want) > 1e-2);
    assert!(max_diff(&a, &slow(&c, Some(&alibi))) < 2e-6);
}

#[test]
fn fused_baselines_equal_the_materialised_path_with_sparse_keys() {
    let keys: Vec<Position> = (0..300).step_by(3).collect();
    let queries: Vec<Position> = vec![299, 5, 150, 151, 0, 77, 298];
    let c = case(2, queries, keys, 16, 9);
    for enc in [
        DistanceEncoding::KerpleLog {
            r1: vec![1.0, 0.5],
            r2: vec![0.3, 0.9],
        },
        DistanceEncoding::T5 {
            buckets: 32,
            max_distance: 128,
            table: random(64, 4).iter().map(|&x| f64::from(x)).collect(),
        },
        DistanceEncoding::Sandwich { heads: 2, dim: 16 },
    ] {
        let b = DistanceBias::new(enc, 2, 64).unwrap();
        assert!(max_diff(&fast(&c, Some(&b)), &slow(&c, Some(&b))) < 2e-6);
    }
}

#[test]
fn decoding_one_row_equals_the_last_row_of_the_prefill() {
    let (_, mlp, params) = fire_pair(4, 32, 1, 5, 0.2);
    let fire = FireBias::new(mlp, params, 256).unwrap();
    let n = 131;
    let c = case(4, (0..n as u64).collect(), (0..n as u64).collect(), 32, 12);
    let full = fast(&c, Some(&fire));
    let d = 32;
    let q_last: Vec<f32> = (0..4)
        .flat_map(|h| c.q[(h * n + n - 1) * d..(h * n + n) * d].to_vec())
        .collect();
    let row = decode(&q_last, &c.k, &c.v, 4, (n - 1) as u64, &c.keys, Some(&fire)).unwrap();
    let want: Vec<f32> = (0..4)
        .flat_map(|h| full[(h * n + n - 1) * d..(h * n + n) * d].to_vec())
        .collect();
    assert!(max_diff(&row, &want) < 1e-6);
}

#[test]
fn a_shared_plan_serves_every_layer() {
    // FIRE-S: one plan, two "layers" with different q/k/v, each equal to its own fresh plan.
    let (_, mlp, params) = fire_pair(2, 32, 1, 8, 1.0);
    let fire = FireBias::new(mlp, params, 128).unwrap();
    let pos: Vec<Position> = (0..70).collect();
    let plan = fire.plan(&pos, &pos).unwrap();
    for seed in [1, 2] {
        let c = case(2, pos.clone(), pos.clone(), 8, seed);
        let shared =
            fused_causal(&c.q, &c.k, &c.v, c.shape, &pos, &pos, Some(plan.as_ref())).unwrap();
        assert_eq!(shared, fast(&c, Some(&fire)));
    }
}

/// A batched call is the rows' own calls side by side, bit for bit (outputs and log-sum-exps),
/// with one plan shared by the rows; sizes that disagree with the batch are errors.
#[test]
fn a_batched_call_equals_one_call_per_row() {
    let (_, mlp, params) = fire_pair(3, 32, 1, 6, 0.3);
    let fire = FireBias::new(mlp, params, 300).unwrap();
    let pos: Vec<Position> = (0..150).collect();
    let plan = fire.plan(&pos, &pos).unwrap();
    let rows: Vec<Case> = (0..3)
        .map(|r| case(3, pos.clone(), pos.clone(), 32, 40 + r))
        .collect();
    let cat = |f: fn(&Case) -> &Vec<f32>| rows.iter().flat_map(|c| f(c).clone()).collect();
    let (q, k, v): (Vec<f32>, Vec<f32>, Vec<f32>) = (cat(|c| &c.q), cat(|c| &c.k), cat(|c| &c.v));
    let shape = rows[0].shape;
    for bias in [None, Some(plan.as_ref())] {
        let (out, lse) = fused_causal_lse_batch(3, &q, &k, &v, shape, &pos, &pos, bias).unwrap();
        let (mut want_out, mut want_lse) = (Vec::new(), Vec::new());
        for c in &rows {
            let (o, l) = fused_causal_lse(&c.q, &c.k, &c.v, shape, &pos, &pos, bias).unwrap();
            want_out.extend(o);
            want_lse.extend(l);
        }
        assert_eq!(out, want_out);
        assert_eq!(lse, want_lse);
    }
    assert!(fused_causal_lse_batch(0, &q, &k, &v, shape, &pos, &pos, None).is_err());
    assert!(fused_causal_lse_batch(2, &q, &k, &v, shape, &pos, &pos, None).is_err());
    let short = &q[..q.len() - 1];
    assert!(fused_causal_lse_batch(3, short, &k, &v, shape, &pos, &pos, None).is_err());
}

#[test]
fn bad_shapes_are_errors_not_panics() {
    let c = case(2, (0..10).collect(), (0..10).collect(), 8, 1);
    let mut s = c.shape;
    s.head_dim = 7;
    assert!(attend(&c.q, &c.k, &c.v, s, &c.queries, &c.keys, None).is_err());
    assert!(attend(&c.q, &c.k, &c.v, c.shape, &c.queries[..9], &c.keys, None).is_err());
    let late: Vec<Position> = (5..15).collect();
    assert!(attend(&c.q, &c.k, &c.v, c.shape, &c.queries, &late, None).is_err());
    let nope = DistanceBias::new(DistanceEncoding::Nope, 3, 8).unwrap();
    assert!(attend(&c.q, &c.k, &c.v, c.shape, &c.queries, &c.keys, Some(&nope)).is_err());
}

fn exp_is_accurate<M: crate::simd::Madd>() {
    for x in [-60.01f32, -87.0, -1e30, f32::NEG_INFINITY] {
        assert_eq!(crate::inner::exp::<M>(x), 0.0);
    }
    for k in 0..=6000 {
        let x = -(k as f32) / 100.0;
        let (got, want) = (crate::inner::exp::<M>(x), x.exp());
        assert!(
            (got - want).abs() <= 4e-7 * want,
            "exp({x}) = {got}, want {want}"
        );
    }
}

#[test]
fn the_vectorised_exp_is_accurate_with_and_without_fma() {
    exp_is_accurate::<crate::simd::Separate>();
    exp_is_accurate::<crate::simd::Fused>();
    exp_is_accurate::<crate::simd::FusedWide>();
}

/// Which loops [`blocked_products`] runs.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Loops {
    /// What the kernels call ([`crate::inner::scores`], [`crate::inner::weighted_values`]):
    /// [`crate::wide`]'s explicit vectors where the CPU has `M`'s lanes.
    Dispatched,
    /// The scalar register blocks, whatever the CPU: the slow twin.
    Scalar,
}

/// The register-blocked products ([`crate::inner`], and [`crate::wide`] under 8 and 16 lanes)
/// on sizes that leave partial row, key and dimension blocks, and head dimensions that take
/// each of the wide value blocks (multiples of 64, 32 and 16). Returns the scores and values.
fn blocked_products<M: crate::simd::Madd>(
    rows: usize,
    keys: usize,
    d: usize,
    loops: Loops,
) -> Products {
    use crate::inner::{pack, Start, ROWS};
    use crate::tile::AffineRow;
    let (scores, weighted_values) = match loops {
        Loops::Dispatched => (
            crate::inner::scores::<M> as Scores,
            crate::inner::weighted_values::<M> as Values,
        ),
        Loops::Scalar => (
            crate::inner::scores_scalar::<M> as Scores,
            crate::inner::values_scalar::<M> as Values,
        ),
    };
    let mut rng = fire_vocabulary::SplitMix64::new(11 + (rows * 1000 + keys * 10 + d) as u64);
    let mut fill = |n: usize| -> Vec<f32> { (0..n).map(|_| rng.normal() as f32).collect() };
    let (q, k, v) = (fill(rows * d), fill(keys * d), fill(keys * d));
    let mut kp = Vec::new();
    let block = crate::inner::keys::<M>();
    pack(&k, keys, d, block, 1.0, &mut kp);
    let stride = keys.div_ceil(block) * block;
    // The bias: 0.5 written in `s`, except every third row, affine in a table and NaN in `s`
    // (which the product must not read): one piece, or two split at a column that moves
    // across the key blocks (at a block's edge, inside one, past the row).
    let mut s = vec![0.5f32; rows.div_ceil(ROWS) * ROWS * stride];
    let table: Vec<f32> = (0..stride + 9).map(|j| j as f32 * 0.01).collect();
    let affine: Vec<Option<AffineRow>> = (0..rows)
        .map(|r| {
            // Slopes whose products round (so that a fused multiply-add would show).
            let row = AffineRow::whole(0.37, -0.61, r % 9);
            match r % 6 {
                1 => Some(row),
                4 => Some(AffineRow {
                    split: (r * 7) % (keys + 3),
                    a2: -1.13,
                    c2: 0.29,
                    ..row
                }),
                _ => None,
            }
        })
        .collect();
    for (r, row) in affine.iter().enumerate() {
        if let Some(row) = row {
            // NaN except the block around a split, which the product reads from `s` (here
            // through the padding columns too, so that the rows compare whole).
            s[r * stride..(r + 1) * stride].fill(f32::NAN);
            for t in row.written(stride) {
                s[r * stride + t] = row.at(&table, t);
            }
        }
    }
    let mut max = vec![f32::NAN; rows.div_ceil(ROWS) * ROWS];
    let start = Start::Bias {
        table: &table,
        affine: &affine,
    };
    scores(&q, rows, &kp, d, &mut s, start, None, Some(&mut max));
    // The maxima handed over are those of the whole stored rows, padding columns included.
    for (r, (row, &m)) in s.chunks_exact(stride).zip(&max).enumerate() {
        let want = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        assert_eq!(m, want, "max of row {r} at {rows}x{keys}x{d}");
    }
    // The same scores, bit for bit, from the bias written out in full and without the maxima.
    let mut again = vec![0.5f32; s.len()];
    for (r, row) in affine.iter().enumerate() {
        if let Some(row) = row {
            for (t, x) in again[r * stride..(r + 1) * stride].iter_mut().enumerate() {
                *x = row.at(&table, t);
            }
        }
    }
    scores(&q, rows, &kp, d, &mut again, Start::STORED, None, None);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(
        bits(&again[..rows * stride]),
        bits(&s[..rows * stride]),
        "scores from affine rows and from written rows at {rows}x{keys}x{d}"
    );
    let bias: Vec<f32> = (0..rows * keys)
        .map(|i| affine[i / keys].map_or(0.5, |row| row.at(&table, i % keys)))
        .collect();
    // Causal-style limits (each row's visible prefix): the limited products agree bit for bit
    // on what they compute, and skip only what is masked.
    let lim: Vec<usize> = (0..rows).map(|r| (r * 7 + 3) % (keys + 1)).collect();
    let (mut full, mut limited) = (vec![0f32; s.len()], vec![f32::NAN; s.len()]);
    scores(&q, rows, &kp, d, &mut full, Start::Zero, None, None);
    scores(
        &q,
        rows,
        &kp,
        d,
        &mut limited,
        Start::Zero,
        Some(&lim),
        None,
    );
    let mut masked = s.clone();
    for (r, &l) in lim.iter().enumerate() {
        let (f, g) = (
            &full[r * stride..r * stride + l],
            &limited[r * stride..r * stride + l],
        );
        assert_eq!(
            bits(f),
            bits(g),
            "limited scores, row {r} at {rows}x{keys}x{d}"
        );
        masked[r * stride + l..(r + 1) * stride].fill(0.0);
    }
    let (mut all, mut some) = (vec![0.25f32; rows * d], vec![0.25f32; rows * d]);
    weighted_values(&masked, (stride, 1), rows, None, &v, keys, d, &mut all);
    weighted_values(
        &masked,
        (stride, 1),
        rows,
        Some(&lim),
        &v,
        keys,
        d,
        &mut some,
    );
    assert_eq!(
        bits(&all),
        bits(&some),
        "limited values at {rows}x{keys}x{d}"
    );
    let mut acc = vec![0.25f32; rows * d];
    weighted_values(&s, (stride, 1), rows, None, &v, keys, d, &mut acc);
    // The transposed product (the backward's dV and dK), read through the strides.
    let mut acc_t = vec![-0.5f32; keys * d];
    weighted_values(&s, (1, stride), keys, None, &q, rows, d, &mut acc_t);
    // The scores without the padding columns, so that blocks of any width compare.
    let s = (0..rows)
        .flat_map(|r| s[r * stride..r * stride + keys].to_vec())
        .collect();
    Products {
        q,
        k,
        v,
        s,
        bias,
        acc,
        acc_t,
    }
}

/// [`crate::inner::scores`]' signature.
type Scores = fn(
    &[f32],
    usize,
    &[f32],
    usize,
    &mut [f32],
    crate::inner::Start<'_>,
    Option<&[usize]>,
    Option<&mut [f32]>,
);

/// [`crate::inner::weighted_values`]' signature.
type Values = fn(&[f32], (usize, usize), usize, Option<&[usize]>, &[f32], usize, usize, &mut [f32]);

struct Products {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    s: Vec<f32>,
    /// The bias the scores started from, `[rows, keys]`.
    bias: Vec<f32>,
    acc: Vec<f32>,
    acc_t: Vec<f32>,
}

const PRODUCT_SIZES: [(usize, usize, usize); 9] = [
    (4, 16, 16),
    (11, 37, 48),
    (7, 21, 19),
    (1, 3, 5),
    (13, 40, 64),
    (13, 70, 32),
    (9, 64, 128),
    (5, 33, 96),
    (64, 64, 64),
];

fn products_match_plain_loops<M: crate::simd::Madd>() {
    for (rows, keys, d) in PRODUCT_SIZES {
        let Products {
            q,
            k,
            v,
            s,
            bias,
            acc,
            acc_t,
        } = blocked_products::<M>(rows, keys, d, Loops::Dispatched);
        for r in 0..rows {
            for t in 0..keys {
                let want: f32 =
                    bias[r * keys + t] + (0..d).map(|c| q[r * d + c] * k[t * d + c]).sum::<f32>();
                let got = s[r * keys + t];
                assert!(
                    (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                    "s[{r},{t}] at {rows}x{keys}x{d}"
                );
            }
        }
        for r in 0..rows {
            for c in 0..d {
                let want: f32 = 0.25
                    + (0..keys)
                        .map(|t| s[r * keys + t] * v[t * d + c])
                        .sum::<f32>();
                let got = acc[r * d + c];
                assert!(
                    (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                    "acc[{r},{c}] at {rows}x{keys}x{d}"
                );
            }
        }
        for t in 0..keys {
            for c in 0..d {
                let want: f32 = -0.5
                    + (0..rows)
                        .map(|r| s[r * keys + t] * q[r * d + c])
                        .sum::<f32>();
                let got = acc_t[t * d + c];
                assert!(
                    (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                    "acc_t[{t},{c}] at {rows}x{keys}x{d}"
                );
            }
        }
    }
}

#[test]
fn the_blocked_products_match_plain_loops_with_and_without_fma() {
    products_match_plain_loops::<crate::simd::Separate>();
    products_match_plain_loops::<crate::simd::Fused>();
    products_match_plain_loops::<crate::simd::FusedWide>();
}

/// The explicit vector blocks ([`crate::wide`], 8 and 16 lanes) do the same fused
/// multiply-adds in the same order per output as the scalar blocks, so they agree with them
/// bit for bit, and the 16-lane ones with the 8-lane ones (where the CPU lacks a width, the
/// dispatch takes the scalar blocks: trivially equal).
#[test]
fn the_vector_blocks_round_exactly_as_the_scalar_ones() {
    use crate::simd::{Fused, FusedWide};
    for (rows, keys, d) in PRODUCT_SIZES {
        let narrow = blocked_products::<Fused>(rows, keys, d, Loops::Dispatched);
        let wide = blocked_products::<FusedWide>(rows, keys, d, Loops::Dispatched);
        for (lanes, got, twin) in [
            (
                8,
                &narrow,
                blocked_products::<Fused>(rows, keys, d, Loops::Scalar),
            ),
            (
                16,
                &wide,
                blocked_products::<FusedWide>(rows, keys, d, Loops::Scalar),
            ),
        ] {
            let at = format!("{lanes} lanes at {rows}x{keys}x{d}");
            assert_eq!(got.s, twin.s, "scores, {at}");
            assert_eq!(got.acc, twin.acc, "values, {at}");
            assert_eq!(got.acc_t, twin.acc_t, "transposed values, {at}");
        }
        assert_eq!(narrow.s, wide.s, "scores at {rows}x{keys}x{d}");
        assert_eq!(narrow.acc, wide.acc, "values at {rows}x{keys}x{d}");
        assert_eq!(
            narrow.acc_t, wide.acc_t,
            "transposed values at {rows}x{keys}x{d}"
        );
    }
}

/// A tile row's maximum and exponentials over its visible prefix, whatever its padding holds
/// (stale scores, NaN, ±∞): the last partial chunk is read whole with the padding masked out.
#[test]
fn row_max_and_exponentials_ignore_the_padding() {
    use crate::inner;
    use crate::simd::Separate;
    let junk = [f32::NAN, f32::INFINITY, 1e30, f32::NEG_INFINITY, 50.0];
    for stride in [16, 48, 64, 128] {
        for vis in 1..=stride {
            for (n, &pad) in junk.iter().enumerate() {
                let mut row: Vec<f32> = (0..stride)
                    .map(|t| {
                        if t < vis {
                            ((t * 37 + n) % 23) as f32 * 0.25 - 3.0
                        } else {
                            pad
                        }
                    })
                    .collect();
                let want_max = row[..vis].iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
                assert_eq!(
                    inner::max(&row, vis),
                    want_max,
                    "stride {stride}, vis {vis}"
                );
                // Against the same exponential one value at a time, in f64 sums.
                let want: Vec<f32> = row[..vis]
                    .iter()
                    .map(|&x| inner::exp::<Separate>(x - want_max))
                    .collect();
                let want_sum: f64 = want.iter().map(|&x| f64::from(x)).sum();
                let sum = inner::exp_sum::<Separate>(&mut row, vis, want_max);
                assert!((f64::from(sum) - want_sum).abs() <= 1e-5 * want_sum);
                assert_eq!(&row[..vis], &want[..], "stride {stride}, vis {vis}");
                assert!(
                    row[vis..]
                        .iter()
                        .take(vis.next_multiple_of(16) - vis)
                        .all(|&x| x == 0.0),
                    "the masked lanes are zeroed"
                );
            }
        }
    }
}
