//! The official T5 bucketing against a literal, independent transcription of mesh-tensorflow's
//! `_relative_position_bucket` (binary32 arithmetic, the platform's `logf`, truncating cast), and
//! the derived boundaries as a general-form instance. spec: [t5.bucket.official],
//! [t5.bucket.official.float], [t5.official.boundaries]

use fire_reference::baselines::t5_official::OfficialBucketing;
use fire_reference::baselines::{T5Buckets, T5Official};
use fire_reference::evaluate;
use proptest::prelude::*;

/// mesh-tensorflow `transformer_layers.py::_relative_position_bucket`, op for op: Python ints
/// are i64, `tf.to_float` is f32, `tf.log` is f32 `ln`, `math.log(max_distance / max_exact)` is
/// an f64 rounded to f32 when it meets the f32 tensor, `tf.to_int32` truncates toward zero.
fn mesh_tf_bucket(
    relative_position: i64,
    bidirectional: bool,
    num_buckets: i64,
    max_distance: i64,
) -> i64 {
    let mut ret = 0i64;
    let mut n = -relative_position;
    let mut num_buckets = num_buckets;
    if bidirectional {
        num_buckets /= 2;
        ret += i64::from(n < 0) * num_buckets;
        n = n.abs();
    } else {
        n = n.max(0);
    }
    // now n is in the range [0, inf)
    let max_exact = num_buckets / 2;
    let is_small = n < max_exact;
    let log_ratio = ((max_distance as f64) / (max_exact as f64)).ln() as f32;
    let val_if_large_f =
        (n as f32 / max_exact as f32).ln() / log_ratio * ((num_buckets - max_exact) as f32);
    let val_if_large = max_exact + i64::from(val_if_large_f as i32);
    let val_if_large = val_if_large.min(num_buckets - 1);
    ret += if is_small { n } else { val_if_large };
    ret
}

fn check_range(
    num_buckets: u32,
    max_distance: u64,
    bidirectional: bool,
    range: std::ops::RangeInclusive<i64>,
) {
    let b = OfficialBucketing::new(num_buckets, max_distance, bidirectional)
        .expect("a valid configuration");
    for rel in range {
        let want = mesh_tf_bucket(
            rel,
            bidirectional,
            i64::from(num_buckets),
            max_distance as i64,
        );
        let got = i64::from(b.bucket(rel));
        assert_eq!(
            got, want,
            "num_buckets {num_buckets}, max_distance {max_distance}, bidirectional {bidirectional}, relative position {rel}"
        );
    }
}

/// The T5 defaults, every |n| ≤ 100000, both signs, both directions.
#[test]
fn defaults_match_mesh_tensorflow_for_every_n_up_to_100000() {
    for bidirectional in [false, true] {
        check_range(32, 128, bidirectional, -100_000..=100_000);
    }
}

/// A grid of other configurations (T5 v1.1/LongT5/mT5 sizes and odd, small ones).
#[test]
fn other_configurations_match_mesh_tensorflow() {
    let configs = [
        (32u32, 64u64),
        (64, 256),
        (128, 1024),
        (16, 64),
        (8, 32),
        (32, 2048),
        (4, 3),
        (6, 100),
        (10, 20),
        (64, 33),
    ];
    for (nb, md) in configs {
        check_range(nb, md, true, -5000..=5000);
        check_range(nb, md, false, -5000..=5000);
    }
    for (nb, md) in [(33u32, 200u64), (3, 36), (5, 686), (2, 2), (9, 128)] {
        check_range(nb, md, false, -5000..=5000);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random valid configurations and distances, including distances far beyond max_distance.
    #[test]
    fn random_configurations_match_mesh_tensorflow(
        half in 2u32..100,
        extra in 1u64..5000,
        bidirectional in any::<bool>(),
        rels in proptest::collection::vec(-1_000_000i64..1_000_000, 64),
    ) {
        let nb = 2 * half;
        let side = if bidirectional { half } else { nb };
        let md = u64::from(side / 2) + extra;
        let b = OfficialBucketing::new(nb, md, bidirectional).unwrap();
        for rel in rels {
            let want = mesh_tf_bucket(rel, bidirectional, i64::from(nb), md as i64);
            prop_assert_eq!(i64::from(b.bucket(rel)), want, "nb {} md {} rel {}", nb, md, rel);
        }
    }

    /// [t5.official.boundaries]: on the causal domain the official bias is the general form
    /// with the derived boundaries, for any values.
    #[test]
    fn official_is_general_form_on_the_causal_domain(
        half in 2u32..40,
        extra in 1u64..300,
        bidirectional in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let nb = 2 * half;
        let side = if bidirectional { half } else { nb };
        let md = u64::from(side / 2) + extra;
        let bucketing = OfficialBucketing::new(nb, md, bidirectional).unwrap();
        let values: Vec<Vec<f64>> = (0..2u64)
            .map(|h| (0..u64::from(nb)).map(|k| ((seed ^ (h * 7919 + k * 104_729)) % 1000) as f64 / 10.0 - 50.0).collect())
            .collect();
        let official = T5Official { bucketing, values };
        let general: T5Buckets = official.as_buckets().unwrap();
        let positions: Vec<u64> = (0..80).chain([md - 1, md, md + 1, 3 * md]).collect();
        let a = evaluate(&official, &positions, &positions).unwrap();
        let g = evaluate(&general, &positions, &positions).unwrap();
        for h in 0..2 {
            for (q, &i) in positions.iter().enumerate() {
                for (k, &j) in positions.iter().enumerate() {
                    if j <= i || !bidirectional {
                        prop_assert_eq!(a.get(h, q, k), g.get(h, q, k));
                    }
                }
            }
        }
    }
}

/// Boundaries strictly increase from 0, every bucket id is used at most once, and a config with
/// empty buckets (bucket ids skipped) still reduces to strictly increasing boundaries.
#[test]
fn derived_boundaries_are_a_valid_general_form() {
    for (nb, md, bidi) in [
        (32u32, 128u64, true),
        (32, 128, false),
        (32, 17, false),
        (64, 33, true),
    ] {
        let b = OfficialBucketing::new(nb, md, bidi).unwrap();
        let bounds = b.boundaries();
        assert_eq!(bounds[0], 0);
        assert!(bounds.windows(2).all(|w| w[0] < w[1]), "{bounds:?}");
        let ids: Vec<u32> = b.segments().iter().map(|s| s.bucket).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
        assert_eq!(*ids.last().unwrap(), b.side_buckets() - 1);
    }
    // 32 unidirectional buckets, max_exact 16, max_distance 17: distance 17 jumps to the cap.
    let b = OfficialBucketing::new(32, 17, false).unwrap();
    assert_eq!(b.boundaries(), (0..=17).collect::<Vec<u64>>());
    assert_eq!(b.segments().last().unwrap().bucket, 31);
}

/// [t5.bucket.official.float]: the two measured examples of the spec, where another arithmetic
/// gives another bucket than the normative binary32 division.
#[test]
fn other_arithmetics_differ_where_the_spec_says() {
    // Binary64 throughout: num_buckets 10, max_distance 160, unidirectional, n = 10.
    let b = OfficialBucketing::new(10, 160, false).unwrap();
    let f64_bucket = 5 + ((10.0f64 / 5.0).ln() / (160.0f64 / 5.0).ln() * 5.0) as u32;
    assert_eq!((b.bucket(-10), f64_bucket), (6, 5));
    // Division by δ as multiplication by its binary32 reciprocal: 3 buckets, 36, n = 6.
    let b = OfficialBucketing::new(3, 36, false).unwrap();
    let delta = (36.0f64 / 1.0).ln() as f32;
    let recip = 1 + (((6.0f32 / 1.0).ln() * (1.0 / delta)) * 2.0) as u32;
    assert_eq!((b.bucket(-6), recip.min(2)), (2, 1));
}
