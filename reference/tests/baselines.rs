//! The baseline encodings of spec/baselines.md: values against hand-computed ones, the Alibi
//! slope schedule against an independent transcription of the published `get_slopes`, RoPE's
//! algebra, and invalid parameters (a typed error, never a panic).

use fire_reference::baselines::alibi::{standard_exponents, standard_slopes};
use fire_reference::baselines::t5_official::OfficialBucketing;
use fire_reference::baselines::{
    Alibi, KerpleLog, KerplePower, Nope, Pairing, Rope, SandwichCentred, SandwichPaper, T5Buckets,
    T5Official, T5Simplified,
};
use fire_reference::{evaluate, AdditiveBias, Error};
use nalgebra::DVector;
use proptest::prelude::*;
use quickcheck::{QuickCheck, TestResult};

/// Press et al.'s `get_slopes`, transcribed literally (Python float arithmetic is f64;
/// `x ** i` with an int `i` is C `pow`).
fn get_slopes(n: usize) -> Vec<f64> {
    fn get_slopes_power_of_2(n: usize) -> Vec<f64> {
        let start = 2f64.powf(-(2f64.powf(-((n as f64).log2() - 3.0))));
        let ratio = start;
        (0..n).map(|i| start * ratio.powf(i as f64)).collect()
    }
    if (n as f64).log2().fract() == 0.0 {
        get_slopes_power_of_2(n)
    } else {
        let closest_power_of_2 = 2usize.pow((n as f64).log2().floor() as u32);
        let mut out = get_slopes_power_of_2(closest_power_of_2);
        out.extend(
            get_slopes(2 * closest_power_of_2)
                .into_iter()
                .step_by(2)
                .take(n - closest_power_of_2),
        );
        out
    }
}

fn ulps(a: f64, b: f64) -> u64 {
    (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs()
}

/// [alibi.slopes]: 1..64 heads agree with the published schedule to 16 ULP (measured worst:
/// 14, at large H). The reference rounds the exact power of two once; the published code
/// computes `start·ratio^k` from a rounded `start`, whose error grows with k. Exact whenever
/// H ≤ 8 is a power of two (every slope is then a power of two).
#[test]
fn alibi_slopes_match_the_published_schedule() {
    let mut worst = 0;
    for heads in 1..=64 {
        let ours = standard_slopes(heads).unwrap();
        let theirs = get_slopes(heads);
        assert_eq!(ours.len(), theirs.len(), "{heads} heads");
        for (h, (a, b)) in ours.iter().zip(&theirs).enumerate() {
            let d = ulps(*a, *b);
            worst = worst.max(d);
            assert!(d <= 16, "{heads} heads, head {h}: {a:e} vs {b:e} ({d} ulp)");
            if heads <= 8 && heads.is_power_of_two() {
                assert_eq!(a, b, "{heads} heads, head {h}");
            }
        }
    }
    // H = 12: 2^-1 … 2^-8, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5.
    let twelve = standard_slopes(12).unwrap();
    let want: Vec<f64> = (1..=8)
        .map(|e| (-(e as f64)).exp2())
        .chain([-0.5f64, -1.5, -2.5, -3.5].map(f64::exp2))
        .collect();
    assert_eq!(twelve, want);
    println!("worst ULP distance to get_slopes over 1..64 heads: {worst}");
}

#[test]
fn baseline_values_by_hand() {
    let q = [0u64, 3, 10];
    let k = [0u64, 3, 10];
    // Alibi r = 0.5: −0.5|i − j|.
    let a = evaluate(&Alibi { slopes: vec![0.5] }, &q, &k).unwrap();
    assert_eq!(a.get(0, 2, 0), -5.0);
    assert_eq!(a.get(0, 0, 2), -5.0, "keys after the query are mirrored");
    // Kerple-log r1 = 2, r2 = 1: −2 ln(1 + n).
    let kl = evaluate(
        &KerpleLog {
            r1: vec![2.0],
            r2: vec![1.0],
        },
        &q,
        &k,
    )
    .unwrap();
    assert_eq!(kl.get(0, 1, 0), -2.0 * 4f64.ln());
    // Kerple-power r1 = 1.5, r2 = 2: −1.5 n².
    let kp = evaluate(
        &KerplePower {
            r1: vec![1.5],
            r2: vec![2.0],
        },
        &q,
        &k,
    )
    .unwrap();
    assert_eq!(kp.get(0, 2, 1), -1.5 * 49.0);
    assert_eq!(kp.get(0, 1, 1), 0.0);
    // Sandwich, paper form, r2 = 1, d' = 1: r1 cos(n / 10000).
    let sp = SandwichPaper {
        r1: vec![3.0],
        r2: 1,
        dim: 1.0,
    };
    let s = evaluate(&sp, &q, &k).unwrap();
    assert!((s.get(0, 2, 0) - 3.0 * (10.0f64 / 10000.0).cos()).abs() < 1e-15);
    // Sandwich centred: 0 at i = j for every head; negative elsewhere; head h scaled by H/(8h).
    let sc = SandwichCentred {
        heads: 4,
        head_dim: 8,
    };
    let c = evaluate(&sc, &q, &k).unwrap();
    for h in 0..4 {
        assert_eq!(c.get(h, 1, 1), 0.0);
        assert!(c.get(h, 2, 0) < 0.0);
        let ratio = c.get(h, 2, 0) / c.get(0, 2, 0);
        assert!((ratio - 1.0 / (h as f64 + 1.0)).abs() < 1e-12);
    }
    // NoPE.
    let n = evaluate(&Nope { heads: 3 }, &q, &k).unwrap();
    assert!(n.to_row_major().iter().all(|&v| v == 0.0));
    // T5 simplified, K = 2: r_{min(n, 2)}; keys after the query get r_0.
    let t = T5Simplified {
        cap: 2,
        values: vec![vec![1.0, 2.0, 3.0]],
    };
    let b = evaluate(&t, &q, &k).unwrap();
    assert_eq!(
        [
            b.get(0, 0, 0),
            b.get(0, 1, 0),
            b.get(0, 2, 1),
            b.get(0, 0, 2)
        ],
        [1.0, 3.0, 3.0, 1.0]
    );
    // General buckets 0 < 2 < 5.
    let g = T5Buckets {
        boundaries: vec![0, 2, 5],
        values: vec![vec![-1.0, -2.0, -3.0]],
    };
    let pos: Vec<u64> = (0..7).collect();
    let gb = evaluate(&g, &pos, &[0]).unwrap();
    let col: Vec<f64> = (0..7).map(|q| gb.get(0, q, 0)).collect();
    assert_eq!(col, [-1.0, -1.0, -2.0, -2.0, -2.0, -3.0, -3.0]);
}

/// [t5.official]: a query sees bucket `bucket(j − i)`; bidirectional keys after the query use
/// the upper half of the table.
#[test]
fn t5_official_bias_reads_the_table() {
    let bucketing = OfficialBucketing::t5_default(true);
    let values = vec![(0..32).map(f64::from).collect::<Vec<_>>()];
    let t5 = T5Official { bucketing, values };
    let b = evaluate(&t5, &[100], &[100, 99, 92, 0, 101, 200]).unwrap();
    let row: Vec<f64> = (0..6).map(|k| b.get(0, 0, k)).collect();
    // n = 0, 1, 8 (first log bucket), 100 (bucket 15 = cap); key after: 16 + 1, 16 + 15.
    assert_eq!(row, [0.0, 1.0, 8.0, 15.0, 17.0, 31.0]);
}

/// [rope.score]: the score depends on positions only through i − j, equals the relative form,
/// and RoPE-PI at scale s equals RoPE at positions s·i, s·j.
#[test]
fn rope_scores_are_relative() {
    let q = DVector::from_vec(vec![0.3, -1.2, 0.7, 2.0, -0.1, 0.5]);
    let k = DVector::from_vec(vec![1.1, 0.4, -0.6, 0.2, 0.9, -1.5]);
    for pairing in [Pairing::HalfSplit, Pairing::Interleaved] {
        let rope = Rope {
            pairing,
            ..Rope::default()
        };
        let s0 = rope.score(&q, &k, 7.0, 3.0).unwrap();
        let s1 = rope.score(&q, &k, 107.0, 103.0).unwrap();
        let s2 = rope.relative_score(&q, &k, 7.0, 3.0).unwrap();
        assert!((s0 - s1).abs() < 1e-12, "{s0} vs {s1}");
        assert!((s0 - s2).abs() < 1e-12, "{s0} vs {s2}");
        // Position 0 is the identity rotation: the plain dot product.
        assert!((rope.score(&q, &k, 0.0, 0.0).unwrap() - q.dot(&k)).abs() < 1e-15);
    }
    let pi = Rope::interpolated(2048.0, 8192.0).unwrap();
    assert_eq!(pi.scale, 0.25);
    let plain = Rope::default();
    let a = pi.score(&q, &k, 4000.0, 12.0).unwrap();
    let b = plain.score(&q, &k, 1000.0, 3.0).unwrap();
    assert!((a - b).abs() < 1e-12);
    // The two pairings are different functions (a wrong pairing is detectable).
    let inter = Rope {
        pairing: Pairing::Interleaved,
        ..Rope::default()
    };
    assert!(
        (inter.score(&q, &k, 5.0, 0.0).unwrap() - plain.score(&q, &k, 5.0, 0.0).unwrap()).abs()
            > 1e-3
    );
    // Half-split plane 0 of a 4-vector is (x0, x2), rotated by the angle p·1.
    let x = DVector::from_vec(vec![1.0, 0.0, 0.0, 0.0]);
    let r = plain.rotate(&x, std::f64::consts::FRAC_PI_2).unwrap();
    assert!(r[0].abs() < 1e-15 && (r[2] - 1.0).abs() < 1e-15 && r[1] == 0.0);
}

proptest! {
    /// Rotations preserve norms, for both pairings and any real position.
    #[test]
    fn rope_rotation_is_orthogonal(
        v in proptest::collection::vec(-10.0f64..10.0, 1..9),
        p in -1e4f64..1e4,
        interleaved in any::<bool>(),
    ) {
        let mut v = v;
        if v.len() % 2 == 1 { v.push(1.0); }
        let x = DVector::from_vec(v);
        let pairing = if interleaved { Pairing::Interleaved } else { Pairing::HalfSplit };
        let r = Rope { pairing, ..Rope::default() }.rotate(&x, p).unwrap();
        prop_assert!((r.norm() - x.norm()).abs() <= 1e-12 * (1.0 + x.norm()));
    }
}

/// quickcheck: Alibi and Kerple are functions of |i − j| (mirror symmetric, Toeplitz).
#[test]
fn distance_only_encodings_depend_on_distance_only() {
    fn prop(i: u32, j: u32, shift: u16) -> TestResult {
        let (i, j, s) = (u64::from(i), u64::from(j), u64::from(shift));
        let encs: Vec<Box<dyn AdditiveBias>> = vec![
            Box::new(Alibi::standard(5).unwrap()),
            Box::new(KerpleLog {
                r1: vec![0.7, 2.0],
                r2: vec![0.3, 1.5],
            }),
            Box::new(KerplePower {
                r1: vec![0.7, 2.0],
                r2: vec![0.3, 2.0],
            }),
            Box::new(SandwichPaper {
                r1: vec![1.0],
                r2: 3,
                dim: 16.0,
            }),
        ];
        for e in &encs {
            // b(i, j), b(i + s, j + s), b(j, i) on the diagonal.
            let a = evaluate(e.as_ref(), &[i, i + s, j], &[j, j + s, i]).unwrap();
            for h in 0..e.heads() {
                let here = a.get(h, 0, 0);
                if here != a.get(h, 1, 1) || here != a.get(h, 2, 2) {
                    return TestResult::failed();
                }
            }
        }
        TestResult::passed()
    }
    QuickCheck::new()
        .tests(200)
        .quickcheck(prop as fn(u32, u32, u16) -> TestResult);
}

fn rejects(e: &dyn AdditiveBias) -> Error {
    evaluate(e, &[0, 1], &[0, 1]).expect_err("invalid parameters must be rejected")
}

/// Every invalid parameter gives a typed error, never a panic. spec: [baselines.heads],
/// [num.errors]
#[test]
fn invalid_parameters_are_errors() {
    let nan = f64::NAN;
    let inf = f64::INFINITY;
    // Alibi.
    assert!(matches!(
        rejects(&Alibi { slopes: vec![] }),
        Error::Empty { .. }
    ));
    for r in [0.0, -1.0, nan, inf] {
        rejects(&Alibi {
            slopes: vec![0.5, r],
        });
    }
    assert!(standard_slopes(0).is_err());
    // Kerple.
    for (r1, r2) in [(0.0, 1.0), (1.0, 0.0), (-1.0, 1.0), (1.0, nan), (inf, 1.0)] {
        rejects(&KerpleLog {
            r1: vec![r1],
            r2: vec![r2],
        });
        rejects(&KerplePower {
            r1: vec![r1],
            r2: vec![r2],
        });
    }
    assert!(matches!(
        rejects(&KerpleLog {
            r1: vec![1.0, 1.0],
            r2: vec![1.0]
        }),
        Error::Shape { .. }
    ));
    assert!(matches!(
        rejects(&KerplePower {
            r1: vec![],
            r2: vec![]
        }),
        Error::Empty { .. }
    ));
    assert!(matches!(
        rejects(&KerplePower {
            r1: vec![1.0],
            r2: vec![2.5]
        }),
        Error::OutOfRange { .. }
    ));
    assert!(evaluate(
        &KerplePower {
            r1: vec![1.0],
            r2: vec![2.0]
        },
        &[0],
        &[0]
    )
    .is_ok());
    // Sandwich.
    rejects(&SandwichPaper {
        r1: vec![1.0],
        r2: 0,
        dim: 8.0,
    });
    rejects(&SandwichPaper {
        r1: vec![1.0],
        r2: 2,
        dim: 0.0,
    });
    rejects(&SandwichPaper {
        r1: vec![nan],
        r2: 2,
        dim: 8.0,
    });
    rejects(&SandwichPaper {
        r1: vec![],
        r2: 2,
        dim: 8.0,
    });
    rejects(&SandwichCentred {
        heads: 0,
        head_dim: 8,
    });
    rejects(&SandwichCentred {
        heads: 2,
        head_dim: 7,
    });
    rejects(&SandwichCentred {
        heads: 2,
        head_dim: 0,
    });
    // NoPE.
    rejects(&Nope { heads: 0 });
    // T5.
    rejects(&T5Simplified {
        cap: 2,
        values: vec![vec![1.0, 2.0]],
    });
    rejects(&T5Simplified {
        cap: 1,
        values: vec![vec![1.0, nan]],
    });
    rejects(&T5Simplified {
        cap: 1,
        values: vec![],
    });
    rejects(&T5Simplified {
        cap: u64::MAX,
        values: vec![vec![1.0]],
    });
    for bounds in [vec![], vec![1, 2], vec![0, 3, 3], vec![0, 5, 2]] {
        let values = vec![vec![0.0; bounds.len().max(1)]];
        rejects(&T5Buckets {
            boundaries: bounds,
            values,
        });
    }
    rejects(&T5Buckets {
        boundaries: vec![0, 4],
        values: vec![vec![0.0], vec![0.0, 1.0]],
    });
    assert!(
        OfficialBucketing::new(31, 128, true).is_err(),
        "odd bidirectional"
    );
    assert!(
        OfficialBucketing::new(2, 128, true).is_err(),
        "too few bidirectional"
    );
    assert!(OfficialBucketing::new(1, 128, false).is_err(), "too few");
    assert!(
        OfficialBucketing::new(32, 8, true).is_err(),
        "max_distance = max_exact"
    );
    assert!(
        OfficialBucketing::new(32, 3, true).is_err(),
        "max_distance < max_exact"
    );
    assert!(OfficialBucketing::new(32, 9, true).is_ok());
    let t5 = T5Official {
        bucketing: OfficialBucketing::t5_default(false),
        values: vec![vec![0.0; 31]],
    };
    assert!(matches!(rejects(&t5), Error::Shape { .. }));
    // RoPE.
    assert!(Rope::interpolated(2048.0, 1024.0).is_err());
    assert!(Rope::interpolated(0.0, 1024.0).is_err());
    assert!(Rope::interpolated(nan, 1024.0).is_err());
    let x = DVector::from_vec(vec![1.0, 2.0, 3.0]);
    assert!(Rope::default().rotate(&x, 1.0).is_err(), "odd dimension");
    let y = DVector::from_vec(vec![1.0, 2.0]);
    assert!(Rope::default().rotate(&y, nan).is_err());
    assert!(Rope::default()
        .score(&y, &DVector::from_vec(vec![1.0; 4]), 0.0, 0.0)
        .is_err());
    assert!(Rope {
        base: 1.0,
        ..Rope::default()
    }
    .rotate(&y, 1.0)
    .is_err());
    assert!(Rope::default()
        .rotate(&DVector::from_vec(vec![inf, 0.0]), 1.0)
        .is_err());
}

/// [t5.official.boundaries]: the T5 defaults' boundaries, both directions.
#[test]
fn snapshot_t5_default_boundaries() {
    let mut out = String::new();
    for bidirectional in [false, true] {
        let b = OfficialBucketing::t5_default(bidirectional);
        out += &format!(
            "num_buckets 32, max_distance 128, bidirectional {bidirectional}: B = {}, max_exact = {}\n",
            b.side_buckets(),
            b.max_exact()
        );
        out += "  bucket  first distance n (j ≤ i)  last distance\n";
        let segs = b.segments();
        for (s, seg) in segs.iter().enumerate() {
            let last = segs
                .get(s + 1)
                .map_or("∞".to_owned(), |n| (n.start - 1).to_string());
            out += &format!("  {:>6}  {:>24}  {:>13}\n", seg.bucket, seg.start, last);
        }
        if bidirectional {
            out += "  keys after the query (j > i): bucket 16 + bucket(j − i) of the table above\n";
        } else {
            out += "  keys after the query (j > i): bucket 0\n";
        }
    }
    insta::assert_snapshot!(out);
}

/// [alibi.slopes]: the standard slopes for 8, 12 and 16 heads, as exponents of 2 and values.
#[test]
fn snapshot_alibi_slopes() {
    let mut out = String::new();
    for heads in [8, 12, 16] {
        out += &format!("{heads} heads\n");
        let slopes = standard_slopes(heads).unwrap();
        for (h, (e, s)) in standard_exponents(heads)
            .unwrap()
            .iter()
            .zip(&slopes)
            .enumerate()
        {
            out += &format!("  head {h:>2}: 2^{:<5} = {s:.17e}\n", format!("{e}"));
        }
    }
    insta::assert_snapshot!(out);
}
