//! Invariants of FIRE stated by spec/fire.md, checked on random parameters.

mod common;

use common::{any_fire, causal_pair};
use fire_reference::bias::{evaluate, AdditiveBias, Pair};
use fire_reference::fire::init::{self, Shape};
use fire_reference::fire::transform::{normalizer, psi};
use fire_reference::fire::{Threshold, Transform};
use proptest::prelude::*;
use quickcheck::quickcheck;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// [fire.input]: on the causal domain the MLP input lies in [0, 1] at any length.
    #[test]
    fn input_in_unit_interval_on_causal_domain(fire in any_fire(), (i, j) in causal_pair(1_000_000)) {
        let x = fire.input(i as f64, j as f64);
        prop_assert!((0.0..=1.0).contains(&x), "x({i}, {j}) = {x}");
    }

    /// [fire.normalizer]: below the threshold the bias depends on i − j alone (Toeplitz).
    #[test]
    fn toeplitz_below_threshold(fire in any_fire(), (i, j) in causal_pair(2000), shift in 0u64..2000) {
        prop_assume!(fire.threshold != Threshold::Disabled);
        let l = fire.threshold_value().unwrap();
        prop_assume!(((i + shift) as f64) <= l);
        let a = fire.bias_at(i as f64, j as f64);
        let b = fire.bias_at((i + shift) as f64, (j + shift) as f64);
        prop_assert_eq!(a, b);
    }

    /// [fire.ablation.no-log], [fire.ablation.no-threshold]: with ψ the identity and no
    /// threshold (ε = 0), x(k·i, k·j) = x(i, j) bit for bit, hence so is the bias.
    #[test]
    fn scale_invariance_without_log_and_threshold(fire in any_fire(), (i, j) in causal_pair(10_000), k in 1u64..100) {
        prop_assume!(i > 0);
        let mut fire = fire;
        fire.transform = Transform::Identity;
        fire.threshold = Threshold::Disabled;
        fire.eps = 0.0;
        let a = fire.bias_at(i as f64, j as f64);
        let b = fire.bias_at((k * i) as f64, (k * j) as f64);
        prop_assert_eq!(a, b);
    }

    /// [fire.normalizer]: N(i) is non-decreasing in i, constant up to L, strictly increasing after.
    #[test]
    fn normalizer_monotone(fire in any_fire(), i in 0u64..1_000_000) {
        let l = fire.threshold_value();
        let n0 = normalizer(fire.transform, fire.c, i as f64, l, fire.eps);
        let n1 = normalizer(fire.transform, fire.c, (i + 1) as f64, l, fire.eps);
        prop_assert!(n1 >= n0);
        match l {
            Some(l) if ((i + 1) as f64) <= l => prop_assert_eq!(n0, n1),
            _ if (i as f64) >= l.unwrap_or(0.0) => prop_assert!(n1 > n0),
            _ => {}
        }
    }

    /// [fire.psi], [fire.threshold]: only |c| and |m| matter.
    #[test]
    fn sign_of_c_and_m_is_immaterial(fire in any_fire(), (i, j) in causal_pair(5000)) {
        let mut flipped = fire.clone();
        flipped.c = -fire.c;
        flipped.l_multiplier = -fire.l_multiplier;
        prop_assert_eq!(fire.bias_at(i as f64, j as f64), flipped.bias_at(i as f64, j as f64));
    }

    /// [conv.future]: a key after the query gets the mirrored distance, normalised by the query.
    #[test]
    fn future_keys_mirror_the_distance(fire in any_fire(), i in 0u64..5000, d in 1u64..5000) {
        prop_assume!(i >= d);
        let future = fire.bias_at(i as f64, (i + d) as f64);
        let past = fire.bias_at(i as f64, (i - d) as f64);
        prop_assert_eq!(future, past);
    }

    /// [conv.layout]: evaluate() on arbitrary position lists places b(i_q, j_k) at [h, q, k].
    #[test]
    fn evaluate_layout_matches_pairs(
        fire in any_fire(),
        queries in prop::collection::vec(0u64..100_000, 1..6),
        keys in prop::collection::vec(0u64..100_000, 1..6),
    ) {
        let bias = evaluate(&fire, &queries, &keys).unwrap();
        prop_assert_eq!(bias.shape(), [fire.heads(), queries.len(), keys.len()]);
        let flat = bias.to_row_major();
        for (q, &i) in queries.iter().enumerate() {
            for (k, &j) in keys.iter().enumerate() {
                let b = fire.bias(Pair { i, j, length: 0 });
                for h in 0..fire.heads() {
                    let at = (h * queries.len() + q) * keys.len() + k;
                    prop_assert_eq!(flat[at], b[h]);
                }
            }
        }
    }

    /// [num.compare]: the magnitude bound really bounds every output.
    #[test]
    fn magnitude_bounds_the_bias(fire in any_fire(), (i, j) in causal_pair(100_000)) {
        let b = fire.bias_at(i as f64, j as f64);
        let m = fire.magnitude_at(i as f64, j as f64);
        for h in 0..b.len() {
            prop_assert!(b[h].abs() <= m[h] * (1.0 + 1e-12), "|{}| > {}", b[h], m[h]);
        }
    }
}

quickcheck! {
    /// [fire.psi]: ψ is increasing in the distance for any non-zero c.
    fn psi_increasing(c: f64, a: u32, b: u32) -> bool {
        if !c.is_finite() || c == 0.0 || c.abs() > 1e6 {
            return true;
        }
        let (lo, hi) = (a.min(b) as f64, a.max(b) as f64);
        psi(Transform::Log, c, lo) <= psi(Transform::Log, c, hi)
    }
}

/// [fire.defaults]: the numbers the spec quotes for the default initialisation.
#[test]
fn default_numbers() {
    let fire = init::appendix_e(Shape::default(), 0);
    assert_eq!(fire.heads(), 12);
    assert_eq!(fire.mlp.depth(), 1);
    assert_eq!(fire.parameter_count(), 462); // (32 + 32) + (32·12 + 12) + c + L_multiplier
    let psi_l = psi(Transform::Log, fire.c, 512.0);
    assert!((psi_l - 52.2f64.ln()).abs() < 1e-15);
    let x = fire.input(100.0, 99.0);
    assert!((x - 1.1f64.ln() / (psi_l + 1e-6)).abs() < 1e-15);
    assert!((x - 0.0241).abs() < 5e-5);
    // Query 8191 normalises by ln(820.1).
    let n = normalizer(Transform::Log, 0.1, 8191.0, Some(512.0), 0.0);
    assert!((n - 820.1f64.ln()).abs() < 1e-12);
}

/// [fire.shared], [fire.per-layer]: FIRE-S repeats one module's bias; per-layer FIRE does not.
#[test]
fn fire_s_shares_one_bias_across_layers() {
    use fire_reference::fire::shared::{per_layer, FireShared};
    let module = init::appendix_e(Shape::default(), 7);
    let shared = FireShared {
        module: module.clone(),
        layers: 3,
    };
    let q = [0, 5, 600];
    let k = [0, 1, 5];
    let layers = shared.evaluate(&q, &k).unwrap();
    assert_eq!(layers.len(), 3);
    assert!(layers.iter().all(|b| *b == layers[0]));
    let other = init::appendix_e(Shape::default(), 8);
    let separate = per_layer(&[module, other], &q, &k).unwrap();
    assert_ne!(separate[0], separate[1]);
    assert_eq!(separate[0], layers[0]);
}

/// [fire.ablation.depth] and friends: each ablation builds a valid module that differs from the
/// default exactly where its clause says.
#[test]
fn ablations_build_valid_distinct_modules() {
    use fire_reference::fire::ablations::ABLATIONS;
    let base = init::appendix_e(Shape::default(), 11);
    for a in ABLATIONS {
        let f = (a.build)(Shape::default(), 11);
        assert!(f.validate().is_ok(), "{}", a.name);
        let differs = evaluate(&f, &[0, 100, 600], &[0, 50]).unwrap()
            != evaluate(&base, &[0, 100, 600], &[0, 50]).unwrap();
        // Fixed threshold and one hidden layer are value-identical to the default: the former
        // only freezes m, the latter *is* Appendix E.
        let same_values = matches!(a.name, "fixed-threshold" | "one-hidden-layer");
        assert_eq!(differs, !same_values, "{}", a.name);
    }
}
