//! Theorem 3.1: every construction equals its target on the causal domain `0 ≤ j ≤ i < L0`
//! for random target parameters and `L0 ≤ 2048` — bit for bit for T5 (every bucketing), Alibi
//! and Kerple; within the stated summation bound for Sandwich and the one-layer T5 form.
//! spec: [thm31.statement], [thm31.exactness]

use fire_reference::baselines::t5_official::OfficialBucketing;
use fire_reference::baselines::{
    Alibi, KerpleLog, KerplePower, SandwichCentred, SandwichPaper, T5Buckets, T5Official,
    T5Simplified,
};
use fire_reference::fire::{Activation, Fire, Transform};
use fire_reference::theorem_3_1::{self as thm, threshold, Construction};
use fire_reference::{evaluate, AdditiveBias, Position};
use proptest::prelude::*;

const U: f64 = f64::EPSILON / 2.0;

/// Query and key lists covering the corners of `[0, L0)` and random interior positions.
fn positions(l0: u64, seeds: &[u64]) -> Vec<Position> {
    if l0 <= 48 {
        return (0..l0).collect();
    }
    let mut out: Vec<Position> = vec![0, 1, l0 / 2, l0 - 2, l0 - 1];
    out.extend(seeds.iter().map(|s| s % l0));
    out
}

/// The stated rounding bound of output `h`: `4(m + 2)·u·(Σ_k |v_{h,k}| + |b_h|)` with `m` the
/// width of the last hidden layer. spec: [thm31.exactness]
fn summation_bound(fire: &Fire, h: usize) -> f64 {
    let out = fire.mlp.layers.last().expect("an output layer");
    let m = out.weight.ncols() as f64;
    let mass: f64 = out.weight.row(h).iter().map(|v| v.abs()).sum::<f64>() + out.bias[h].abs();
    4.0 * (m + 2.0) * U * mass
}

/// Compares `got` (a construction) with `want` (its target) on every causal pair of the lists;
/// `tolerance(h)` = 0 demands equality.
fn assert_causal_equal(
    got: &dyn AdditiveBias,
    want: &dyn AdditiveBias,
    queries: &[Position],
    keys: &[Position],
    tolerance: &dyn Fn(usize) -> f64,
) -> Result<(), TestCaseError> {
    let g = evaluate(got, queries, keys).expect("valid inputs");
    let w = evaluate(want, queries, keys).expect("valid inputs");
    prop_assert_eq!(g.heads(), w.heads());
    for h in 0..g.heads() {
        let tol = tolerance(h);
        for (q, &i) in queries.iter().enumerate() {
            for (k, &j) in keys.iter().enumerate() {
                if j > i {
                    continue;
                }
                let (a, b) = (g.get(h, q, k), w.get(h, q, k));
                if tol == 0.0 {
                    prop_assert!(a == b, "head {h}, i {i}, j {j}: FIRE {a:e} vs target {b:e}");
                } else {
                    prop_assert!(
                        (a - b).abs() <= tol,
                        "head {h}, i {i}, j {j}: FIRE {a:e} vs target {b:e}, |Δ| {:e} > {tol:e}",
                        (a - b).abs()
                    );
                }
            }
        }
    }
    Ok(())
}

fn exact(_: usize) -> f64 {
    0.0
}

fn values(heads: usize, buckets: usize) -> impl Strategy<Value = Vec<Vec<f64>>> {
    proptest::collection::vec(proptest::collection::vec(-10.0f64..10.0, buckets), heads)
}

fn general_buckets() -> impl Strategy<Value = T5Buckets> {
    (1usize..4, proptest::collection::vec(1u64..120, 0..40)).prop_flat_map(|(heads, gaps)| {
        let mut boundaries = vec![0u64];
        for g in gaps {
            boundaries.push(boundaries.last().expect("l_0") + g);
        }
        let n = boundaries.len();
        values(heads, n).prop_map(move |values| T5Buckets {
            boundaries: boundaries.clone(),
            values,
        })
    })
}

fn l0() -> impl Strategy<Value = u64> {
    prop_oneof![1u64..=64, 1u64..=2048, Just(2048u64), Just(1000u64)]
}

fn seeds() -> impl Strategy<Value = Vec<u64>> {
    proptest::collection::vec(any::<u64>(), 20)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// [thm31.t5]: general buckets, bit for bit.
    #[test]
    fn t5_general_buckets(target in general_buckets(), l0 in l0(), s in seeds()) {
        let fire = thm::t5_buckets(&target, l0).unwrap();
        let p = positions(l0, &s);
        assert_causal_equal(&fire, &target, &p, &p, &exact)?;
    }

    /// [thm31.t5]: the simplified form, bit for bit.
    #[test]
    fn t5_simplified(
        (cap, values) in (0u64..64).prop_flat_map(|k| (Just(k), values(2, k as usize + 1))),
        l0 in l0(),
        s in seeds(),
    ) {
        let target = T5Simplified { cap, values };
        let fire = thm::t5_simplified(&target, l0).unwrap();
        let p = positions(l0, &s);
        assert_causal_equal(&fire, &target, &p, &p, &exact)?;
    }

    /// [thm31.t5]: the official bucketing (both directions), bit for bit on the causal domain.
    #[test]
    fn t5_official(
        (half, extra, bidirectional, values) in (2u32..33, 1u64..400, any::<bool>())
            .prop_flat_map(|(h, e, b)| (Just(h), Just(e), Just(b), values(3, 2 * h as usize))),
        l0 in l0(),
        s in seeds(),
    ) {
        let nb = 2 * half;
        let side = if bidirectional { half } else { nb };
        let bucketing = OfficialBucketing::new(nb, u64::from(side / 2) + extra, bidirectional).unwrap();
        let target = T5Official { bucketing, values };
        let fire = thm::t5_official(&target, l0).unwrap();
        let p = positions(l0, &s);
        assert_causal_equal(&fire, &target, &p, &p, &exact)?;
    }

    /// [thm31.t5.steps]: the one-hidden-layer form, within its summation bound.
    #[test]
    fn t5_steps_within_bound(target in general_buckets(), l0 in l0(), s in seeds()) {
        let fire = thm::t5_steps(&target, l0).unwrap();
        let p = positions(l0, &s);
        let bound = |h: usize| summation_bound(&fire, h);
        assert_causal_equal(&fire, &target, &p, &p, &bound)?;
    }

    /// [thm31.alibi]: bit for bit, keys after the query included (both mirror |i − j|).
    #[test]
    fn alibi(slopes in proptest::collection::vec(1e-4f64..16.0, 1..9), l0 in l0(), s in seeds()) {
        let target = Alibi { slopes };
        let fire = thm::alibi(&target, l0).unwrap();
        let p = positions(l0, &s);
        assert_causal_equal(&fire, &target, &p, &p, &exact)?;
        let (g, w) = (evaluate(&fire, &p, &p).unwrap(), evaluate(&target, &p, &p).unwrap());
        prop_assert_eq!(g, w);
    }

    /// [thm31.kerple-log]: bit for bit.
    #[test]
    fn kerple_log(
        (r1, r2) in (1usize..7).prop_flat_map(|h| (
            proptest::collection::vec(1e-2f64..10.0, h),
            proptest::collection::vec(1e-2f64..10.0, h),
        )),
        l0 in l0(),
        s in seeds(),
    ) {
        let target = KerpleLog { r1, r2 };
        let fire = thm::kerple_log(&target, l0).unwrap();
        let p = positions(l0, &s);
        assert_causal_equal(&fire, &target, &p, &p, &exact)?;
    }

    /// [thm31.kerple-power]: bit for bit; heads with equal exponents share one module.
    #[test]
    fn kerple_power(
        (r1, r2) in (1usize..7).prop_flat_map(|h| (
            proptest::collection::vec(1e-2f64..10.0, h),
            proptest::collection::vec(prop_oneof![Just(1.0f64), Just(2.0), Just(0.5), 1e-2f64..=2.0], h),
        )),
        l0 in l0(),
        s in seeds(),
    ) {
        let target = KerplePower { r1, r2: r2.clone() };
        let c = thm::kerple_power(&target, l0).unwrap();
        let runs = 1 + r2.windows(2).filter(|w| w[0] != w[1]).count();
        prop_assert_eq!(c.parts.len(), runs);
        let p = positions(l0, &s);
        assert_causal_equal(&c, &target, &p, &p, &exact)?;
    }

    /// [thm31.sandwich]: within the summation bound.
    #[test]
    fn sandwich_paper(
        r1 in proptest::collection::vec(1e-2f64..10.0, 1..5),
        r2 in 1u32..24,
        dim in 1.0f64..256.0,
        l0 in l0(),
        s in seeds(),
    ) {
        let target = SandwichPaper { r1, r2, dim };
        let fire = thm::sandwich_paper(&target, l0).unwrap();
        let p = positions(l0, &s);
        let bound = |h: usize| summation_bound(&fire, h);
        assert_causal_equal(&fire, &target, &p, &p, &bound)?;
    }

    /// [thm31.sandwich-centred]: within the summation bound.
    #[test]
    fn sandwich_centred(heads in 1usize..17, half in 1u32..65, l0 in l0(), s in seeds()) {
        let target = SandwichCentred { heads, head_dim: 2 * half };
        let fire = thm::sandwich_centred(&target, l0).unwrap();
        let p = positions(l0, &s);
        let bound = |h: usize| summation_bound(&fire, h);
        assert_causal_equal(&fire, &target, &p, &p, &bound)?;
    }
}

/// [thm31.common]: the shared shape of every construction.
#[test]
fn constructions_share_the_common_shape() {
    assert_eq!(threshold(1).unwrap(), 1.0);
    assert_eq!(threshold(1000).unwrap(), 1024.0);
    assert_eq!(threshold(2048).unwrap(), 2048.0);
    let t5 = T5Official {
        bucketing: OfficialBucketing::t5_default(false),
        values: vec![vec![0.5; 32]; 12],
    };
    let fires: Vec<(Fire, usize, Activation)> = vec![
        (
            thm::t5_official(&t5, 1000).unwrap(),
            2,
            Activation::Heaviside,
        ),
        (
            thm::alibi(&Alibi::standard(12).unwrap(), 1000).unwrap(),
            0,
            Activation::Identity,
        ),
        (
            thm::kerple_log(
                &KerpleLog {
                    r1: vec![1.0; 3],
                    r2: vec![0.5; 3],
                },
                1000,
            )
            .unwrap(),
            1,
            Activation::Log1p,
        ),
        (
            thm::sandwich_paper(
                &SandwichPaper {
                    r1: vec![1.0],
                    r2: 4,
                    dim: 8.0,
                },
                1000,
            )
            .unwrap(),
            1,
            Activation::Cos,
        ),
    ];
    for (fire, depth, act) in fires {
        assert_eq!(fire.transform, Transform::Identity);
        assert_eq!(fire.eps, 0.0);
        assert_eq!((fire.l_init, fire.l_multiplier), (1024.0, 1.0));
        assert_eq!(fire.mlp.depth(), depth);
        if depth > 0 {
            assert_eq!(fire.mlp.activation, act);
        }
        assert!(fire.mlp.final_activation.is_none());
    }
    let kp = thm::kerple_power(
        &KerplePower {
            r1: vec![1.0, 2.0, 3.0],
            r2: vec![1.5, 1.5, 0.5],
        },
        64,
    )
    .unwrap();
    assert_eq!(kp.parts.len(), 2);
    assert_eq!(kp.parts[0].mlp.activation, Activation::Power(1.5));
    assert!(kp.clone().into_single().is_none());
}

/// [thm31.beyond]: past the threshold P, the construction is the target's distance profile
/// compressed by P/i (checked for Alibi: −r·(i − j)·P/i), no longer the target.
#[test]
fn beyond_the_threshold_the_profile_is_interpolated() {
    let target = Alibi {
        slopes: vec![0.25, 2.0],
    };
    let fire = thm::alibi(&target, 100).unwrap();
    let p = 128.0;
    let queries = [128u64, 129, 200, 1000, 40_000];
    let keys = [0u64, 1, 64, 127];
    let g = evaluate(&fire, &queries, &keys).unwrap();
    let w = evaluate(&target, &queries, &keys).unwrap();
    for (h, r) in target.slopes.iter().enumerate() {
        for (q, &i) in queries.iter().enumerate() {
            for (k, &j) in keys.iter().enumerate() {
                let want = -r * (i - j) as f64 * p / i as f64;
                assert!((g.get(h, q, k) - want).abs() <= 8.0 * U * want.abs());
                if i > 128 && j < i - 1 {
                    assert!(g.get(h, q, k) != w.get(h, q, k), "no longer the target");
                }
            }
        }
    }
}

/// [thm31.future]: for T5 (which gives keys after the query r_0 or a separate bucket half),
/// the construction mirrors instead: FIRE(i, j) = T5(j, i) for j > i, i ≤ P.
#[test]
fn t5_keys_after_the_query_are_mirrored() {
    let target = T5Buckets {
        boundaries: vec![0, 1, 4, 9],
        values: vec![vec![10.0, 20.0, 30.0, 40.0]],
    };
    let fire = thm::t5_buckets(&target, 16).unwrap();
    let pos: Vec<u64> = (0..16).collect();
    let g = evaluate(&fire, &pos, &pos).unwrap();
    let w = evaluate(&target, &pos, &pos).unwrap();
    for i in 0..16 {
        for j in i + 1..16 {
            assert_eq!(g.get(0, i, j), w.get(0, j, i));
            assert_eq!(w.get(0, i, j), 10.0);
        }
    }
}

/// Invalid L0 or targets give errors, never panics; an overflowing weight is an error.
#[test]
fn invalid_inputs_are_errors() {
    let alibi = Alibi { slopes: vec![0.5] };
    assert!(thm::alibi(&alibi, 0).is_err());
    assert!(thm::alibi(&alibi, (1 << 52) + 1).is_err());
    assert!(thm::alibi(&alibi, 1 << 52).is_ok());
    assert!(thm::alibi(&Alibi { slopes: vec![-1.0] }, 8).is_err());
    assert!(
        thm::alibi(
            &Alibi {
                slopes: vec![1e308]
            },
            2048
        )
        .is_err(),
        "−r·P overflows"
    );
    assert!(thm::kerple_log(
        &KerpleLog {
            r1: vec![1.0],
            r2: vec![]
        },
        8
    )
    .is_err());
    assert!(thm::kerple_power(
        &KerplePower {
            r1: vec![1.0],
            r2: vec![3.0]
        },
        8
    )
    .is_err());
    assert!(thm::sandwich_paper(
        &SandwichPaper {
            r1: vec![1.0],
            r2: 0,
            dim: 8.0
        },
        8
    )
    .is_err());
    assert!(thm::sandwich_centred(
        &SandwichCentred {
            heads: 1,
            head_dim: 3
        },
        8
    )
    .is_err());
    assert!(thm::t5_buckets(
        &T5Buckets {
            boundaries: vec![0, 0],
            values: vec![vec![0.0; 2]]
        },
        8
    )
    .is_err());
    assert!(
        thm::t5_steps(
            &T5Buckets {
                boundaries: vec![0, 1],
                values: vec![vec![-1e308, 1e308]]
            },
            8
        )
        .is_err(),
        "increment overflows"
    );
    assert!(thm::t5_simplified(
        &T5Simplified {
            cap: 3,
            values: vec![vec![0.0; 3]]
        },
        8
    )
    .is_err());
    let c = Construction { parts: vec![] };
    assert!(evaluate(&c, &[0], &[0]).is_err());
}
