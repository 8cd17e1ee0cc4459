//! Declared conventions are checked as declared, and a convention that is used but not declared
//! is named by the diagnosis. spec: [conv.future], [attn.placement]

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::path::Path;

use fire_conformance::conventions::causal_cotangent;
use fire_conformance::implementation::{
    Capabilities, FutureKeys, Implementation, Placement, Reply, Request,
};
use fire_conformance::implementations::reference::{evaluate_placed, Reference};
use fire_conformance::runner::{self, Options, Overall, Status};
use fire_conformance::vectors::format::{Encoding, Kind};
use fire_conformance::vectors::load;
use fire_reference::attention::Placement as RefPlacement;

/// The reference, but keys after the query get `future` and the bias enters `placement`; it
/// declares `declared`. Under `masked` the mask value is `mask`.
struct Convention {
    future: FutureKeys,
    placement: Placement,
    declared: (FutureKeys, Placement),
    mask: f64,
}

impl Convention {
    fn new(future: FutureKeys, placement: Placement, declared: (FutureKeys, Placement)) -> Self {
        Convention {
            future,
            placement,
            declared,
            mask: f64::NEG_INFINITY,
        }
    }

    /// Right under the declared `future` convention, after-scaling.
    fn honest(future: FutureKeys) -> Self {
        Self::new(
            future,
            Placement::AfterScaling,
            (future, Placement::AfterScaling),
        )
    }
}

impl Implementation for Convention {
    fn capabilities(&mut self) -> fire_conformance::error::Result<Capabilities> {
        let mut c = Reference.capabilities()?;
        (c.future_keys, c.placement) = self.declared;
        Ok(c)
    }

    fn run(&mut self, r: &Request) -> Reply {
        let place = match self.placement {
            Placement::AfterScaling => RefPlacement::AfterScaling,
            Placement::BeforeScaling => RefPlacement::BeforeScaling,
        };
        let mut inputs = r.inputs.clone();
        if r.kind == Kind::Vjp && self.future != FutureKeys::Mirrored {
            // The module's bias at keys after the query is a constant (or unchecked): its true
            // gradient sees only the causal entries of the cotangent.
            if let Some(c) = causal_cotangent(&inputs) {
                inputs.cotangent = Some(c);
            }
        }
        let Ok(mut out) = evaluate_placed(&r.encoding, r.kind, &inputs, None, place) else {
            return Reply::Errored("rejected".into());
        };
        // A module's future-keys convention is its FIRE module's; the baselines it computes as
        // their clauses define them.
        if r.kind == Kind::Bias && !matches!(r.encoding, Encoding::Baseline(_)) {
            let (nq, nk) = (r.inputs.queries.len(), r.inputs.keys.len());
            for t in out.values_mut() {
                for (n, v) in t.data.iter_mut().enumerate() {
                    if r.inputs.keys[n % nk] > r.inputs.queries[(n / nk) % nq] {
                        match self.future {
                            FutureKeys::Zero => *v = 0.0,
                            FutureKeys::Masked => *v = self.mask,
                            FutureKeys::Negated if self.mask.is_nan() => *v = f64::NAN,
                            FutureKeys::Negated => *v = 12345.0,
                            FutureKeys::Mirrored => {}
                        }
                    }
                }
            }
        }
        Reply::Output(out)
    }
}

fn run(imp: &mut dyn Implementation, glob: &str) -> runner::Report {
    let suite = load::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors")).unwrap();
    let opts = Options {
        run: vec![glob.into()],
        diagnose: true,
        ..Options::default()
    };
    runner::run(&suite, imp, &opts).unwrap()
}

#[test]
fn declared_future_key_conventions_pass_and_undeclared_ones_are_named() {
    for future in [FutureKeys::Zero, FutureKeys::Masked, FutureKeys::Negated] {
        let mut honest = Convention::honest(future);
        let r = run(&mut honest, "fire/random-params/*");
        assert_eq!(r.counts().1, 0, "{:?} declared: {}", future, r.summary());
    }
    let mut silent = Convention::new(
        FutureKeys::Zero,
        Placement::AfterScaling,
        (FutureKeys::Mirrored, Placement::AfterScaling),
    );
    let r = run(&mut silent, "fire/random-params/*");
    let o = r
        .outcomes
        .iter()
        .find(|o| o.status == Status::Failed)
        .unwrap();
    let notes = &o.finding.as_ref().unwrap().notes;
    assert!(
        notes.iter().any(|n| n.contains("follow `zero`")),
        "{notes:?}"
    );
    // The run's verdict says so too, over bias and gradient cases alike: a declaration to fix.
    let r = run(&mut silent, "fire*");
    assert!(r.counts().1 > 0);
    assert_eq!(
        r.overall,
        Some(Overall::Convention(FutureKeys::Zero)),
        "{}",
        r.summary()
    );
    let text = fire_conformance::report::text::render(&r, false);
    assert!(
        text.contains("follow `zero`, not the declared `mirrored`"),
        "{text}"
    );
}

/// The declaration concerns FIRE's keys after the query: a module declaring `zero` or `masked`
/// that computes T5 (bucket 0 there), Alibi and Kerple as their clauses define them passes
/// every case, baselines included.
#[test]
fn a_future_keys_declaration_leaves_the_baselines_as_their_clauses_define_them() {
    for future in [FutureKeys::Zero, FutureKeys::Masked, FutureKeys::Negated] {
        let mut honest = Convention::honest(future);
        let r = run(&mut honest, "*");
        let (passed, failed, _) = r.counts();
        assert_eq!(failed, 0, "{future:?}: {}", r.summary());
        let baselines = r
            .outcomes
            .iter()
            .filter(|o| {
                o.status == Status::Passed
                    && ["t5/", "alibi/", "kerple/"]
                        .iter()
                        .any(|f| o.id.starts_with(f))
            })
            .count();
        assert!(baselines >= 5 && passed > 50, "{future:?}: {}", r.summary());
    }
}

#[test]
fn a_declared_before_scaling_placement_passes_and_an_undeclared_one_is_named() {
    let mut honest = Convention::new(
        FutureKeys::Mirrored,
        Placement::BeforeScaling,
        (FutureKeys::Mirrored, Placement::BeforeScaling),
    );
    assert_eq!(run(&mut honest, "attention/*").counts().1, 0);
    let mut silent = Convention::new(
        FutureKeys::Mirrored,
        Placement::BeforeScaling,
        (FutureKeys::Mirrored, Placement::AfterScaling),
    );
    let r = run(&mut silent, "attention/*");
    assert!(r.counts().1 > 0);
    assert_eq!(
        r.overall,
        Some(Overall::Variants(vec!["bias-before-scaling"])),
        "{}",
        r.summary()
    );
}

/// A module right on the causal triangle under its declared convention gets gradients exactly
/// right for the cotangent that convention allows: gradient cases pass, as bias cases do.
#[test]
fn declared_conventions_apply_to_gradient_cotangents() {
    for future in [FutureKeys::Zero, FutureKeys::Masked, FutureKeys::Negated] {
        let mut honest = Convention::honest(future);
        let r = run(&mut honest, "fire-grad/*");
        let (passed, failed, _) = r.counts();
        assert_eq!(failed, 0, "{future:?}: {}", r.summary());
        assert!(passed >= 10, "{future:?}: {}", r.summary());
    }
    // Declaring `mirrored` while masking the gradient is a real deviation, and is caught.
    let mut silent = Convention::new(
        FutureKeys::Zero,
        Placement::AfterScaling,
        (FutureKeys::Mirrored, Placement::AfterScaling),
    );
    assert!(run(&mut silent, "fire-grad/*").counts().1 > 0);
}

/// `masked` means the mask folded into the bias, whatever finite value the module masks with:
/// `finfo(f32).min`, `-1e9`, BERT's `-1e4`, `-1e4` added to a bias (`-9999.2`) and `-1e4` in
/// bf16 (`-9984`) pass as `-inf` does; a value a softmax still weighs (`-100`, `-500`), zero or
/// NaN is no mask, fails, and the diagnosis says no convention fits.
#[test]
fn masked_accepts_every_mask_value_and_nothing_else() {
    for mask in [
        f64::NEG_INFINITY,
        f64::from(f32::MIN),
        f64::from(half_min()),
        -1e9,
        -1e30,
        -1e4,
        -1e4 + 0.8,
        -9984.0,
        -1e3,
    ] {
        let mut honest = Convention::honest(FutureKeys::Masked);
        honest.mask = mask;
        let r = run(&mut honest, "fire/*");
        let (passed, failed, _) = r.counts();
        assert_eq!(failed, 0, "mask {mask:e}: {}", r.summary());
        assert!(passed >= 10, "mask {mask:e}: {}", r.summary());
        assert_eq!(r.future_unchecked, 0);
    }
    for not_a_mask in [-100.0, -500.0, 0.0, f64::NAN, f64::INFINITY] {
        let mut wrong = Convention::honest(FutureKeys::Masked);
        wrong.mask = not_a_mask;
        let r = run(&mut wrong, "fire/random-params/*");
        let failed: Vec<_> = r
            .outcomes
            .iter()
            .filter(|o| o.status == Status::Failed)
            .collect();
        assert!(!failed.is_empty(), "{not_a_mask:e} passed as a mask");
        let notes = &failed[0].finding.as_ref().unwrap().notes;
        // A wrong mask is a mistake, not another convention; zeros are the `zero` convention.
        let overall = if not_a_mask == 0.0 {
            Overall::Convention(FutureKeys::Zero)
        } else {
            Overall::Variants(vec![])
        };
        assert_eq!(r.overall, Some(overall), "{not_a_mask:e}");
        if not_a_mask == -100.0 {
            // A future-only deviation no convention explains is called one, with the risk of
            // declaring it away as `negated`.
            assert!(
                notes
                    .iter()
                    .any(|n| n.contains("no convention reproduces them") && n.contains("negated")),
                "{notes:?}"
            );
        }
        if not_a_mask == 0.0 {
            // Zero is a declared convention of its own, and the diagnosis says so.
            assert!(
                notes.iter().any(|n| n.contains("follow `zero`")),
                "{notes:?}"
            );
        }
    }
}

/// float16's most negative finite value, the `finfo(torch.float16).min` of a half-precision
/// module.
fn half_min() -> f32 {
    -65504.0
}

/// `negated` checks nothing above the diagonal, and the report says how much it left out;
/// the other declarations leave nothing out.
#[test]
fn negated_reports_what_it_leaves_unchecked() {
    let r = run(
        &mut Convention::honest(FutureKeys::Negated),
        "fire/random-params/*",
    );
    assert_eq!(r.counts().1, 0, "{}", r.summary());
    assert!(r.future_unchecked > 0);
    let text = fire_conformance::report::text::render(&r, false);
    assert!(
        text.contains(&format!(
            "not checked: {} bias element(s) at keys after their query",
            r.future_unchecked
        )),
        "{text}"
    );
    for future in [FutureKeys::Mirrored, FutureKeys::Zero, FutureKeys::Masked] {
        let r = run(&mut Convention::honest(future), "fire/random-params/*");
        assert_eq!(r.future_unchecked, 0, "{future:?}");
        let text = fire_conformance::report::text::render(&r, false);
        assert!(!text.contains("at keys after their query"), "{text}");
    }
}

/// `negated` with NaN above the diagonal, whose gradients are NaN as 0·NaN makes them.
struct NanAbove(Convention);

impl Implementation for NanAbove {
    fn capabilities(&mut self) -> fire_conformance::error::Result<Capabilities> {
        self.0.capabilities()
    }

    fn run(&mut self, r: &Request) -> Reply {
        match self.0.run(r) {
            Reply::Output(mut out) if r.kind == Kind::Vjp => {
                for t in out.values_mut() {
                    t.data.iter_mut().for_each(|v| *v = f64::NAN);
                }
                Reply::Output(out)
            }
            other => other,
        }
    }
}

/// Under `negated` the bias passes however it is computed above the diagonal, but NaN there
/// fails the gradient cases, and the run-level verdict names the NaN as the cause.
#[test]
fn nan_gradients_under_negated_are_called_nan_not_a_detached_parameter() {
    let mut honest = Convention::honest(FutureKeys::Negated);
    honest.mask = f64::NAN;
    let r = run(&mut NanAbove(honest), "fire*");
    assert!(r.counts().1 > 0);
    assert!(
        matches!(&r.overall, Some(Overall::Gradients { nan: true, params, .. }) if params.contains(&"c".to_owned())),
        "{:?}",
        r.overall
    );
    let text = fire_conformance::report::text::render(&r, false);
    assert!(text.contains("are NaN") && text.contains("0·NaN"), "{text}");
}

/// A run whose failures are a variant that differs only at keys after the query (the distance
/// clamped there, as a module tril-ing its distances does) is told, at run level, that
/// declaring `negated` is what a causal model doing so by design needs; a mistake elsewhere,
/// or a run that already declares `negated`, is not. spec: [conv.future]
#[test]
fn the_run_level_line_repeats_the_negated_hint_for_future_only_variants() {
    use fire_conformance::implementations::mutant::{Arithmetic, Mutant};
    use fire_conformance::overall::may_declare;
    let report = |mistake| {
        run(
            &mut Mutant::new(Some(mistake), Arithmetic::F64).unwrap(),
            "*",
        )
    };
    let mut clamped = report("future-distance-clamped");
    assert_eq!(may_declare(&clamped), Some(FutureKeys::Negated));
    clamped.capabilities.future_keys = FutureKeys::Negated;
    assert_eq!(may_declare(&clamped), None);
    clamped.capabilities.future_keys = FutureKeys::Mirrored;
    let text = fire_conformance::report::text::render(&clamped, false);
    assert!(text.contains("declare `negated`"), "{text}");
    let json = fire_conformance::report::json::render(&clamped);
    assert_eq!(json["overall_may_declare"], "negated");
    // A baseline's mistake at keys after the query is not FIRE's to declare away: the
    // declaration concerns FIRE's encodings only.
    let kerple = report("kerple-signed-distance");
    assert_eq!(kerple.overall_variants(), vec!["kerple-signed-distance"]);
    assert_eq!(may_declare(&kerple), None);
    let other = report("no-abs-c");
    assert_eq!(may_declare(&other), None);
    let json = fire_conformance::report::json::render(&other);
    assert!(json["overall_may_declare"].is_null());
}

/// One mistake on the causal triangle (`causal`'s output there) and another at keys after the
/// query (`future`'s): FIRE bias cases only.
struct TwoSided {
    causal: fire_conformance::implementations::mutant::Mutant,
    future: fire_conformance::implementations::mutant::Mutant,
}

impl Implementation for TwoSided {
    fn capabilities(&mut self) -> fire_conformance::error::Result<Capabilities> {
        self.causal.capabilities()
    }

    fn run(&mut self, r: &Request) -> Reply {
        if r.kind != Kind::Bias || !matches!(r.encoding, Encoding::Fire(_)) {
            return Reply::Skipped("bias cases only".into());
        }
        let (Reply::Output(mut a), Reply::Output(b)) = (self.causal.run(r), self.future.run(r))
        else {
            return Reply::Errored("a side failed".into());
        };
        let (q, k) = (&r.inputs.queries, &r.inputs.keys);
        let (bias, other) = (a.get_mut("bias").unwrap(), &b["bias"]);
        for (n, x) in bias.data.iter_mut().enumerate() {
            let (row, col) = ((n / k.len()) % q.len(), n % k.len());
            if k[col] > q[row] {
                *x = other.data[n];
            }
        }
        Reply::Output(a)
    }
}

/// A module with one mistake in its normaliser and another in how it treats keys after the
/// query (HanseulJo/position-coupling's FIRE: `min(i, L)` and distances clamped at 0) is told
/// both, not "no single catalogued variant". spec: [variants.catalogue], [conv.future]
#[test]
fn two_mistakes_one_each_side_of_the_diagonal_are_both_named() {
    use fire_conformance::implementations::mutant::{Arithmetic, Mutant};
    let mut imp = TwoSided {
        causal: Mutant::new(Some("threshold-as-min"), Arithmetic::F64).unwrap(),
        future: Mutant::new(Some("future-distance-clamped"), Arithmetic::F64).unwrap(),
    };
    let report = run(&mut imp, "*");
    assert_eq!(
        report.overall,
        Some(Overall::Regions {
            causal: "threshold-as-min",
            future: "future-distance-clamped"
        })
    );
    let text = fire_conformance::report::text::render(&report, false);
    assert!(
        text.contains("the causal triangle follows variant `threshold-as-min`"),
        "{text}"
    );
    // One mistake alone is still named alone.
    let report = run(
        &mut Mutant::new(Some("threshold-as-min"), Arithmetic::F64).unwrap(),
        "*",
    );
    assert_eq!(report.overall_variants(), vec!["threshold-as-min"]);
}
