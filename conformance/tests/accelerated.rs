//! The accelerated crate, driven in process, against the committed suite in f32: every case it
//! answers passes (the ReLU-kink gradients included) and every case it does not answer says
//! precisely why.

#![cfg(feature = "accelerated")]
#![allow(clippy::unwrap_used)] // tests may unwrap

use std::path::Path;

use fire_conformance::implementations::accelerated::Accelerated;
use fire_conformance::runner::{self, Options, Status};
use fire_conformance::vectors::load;

#[test]
fn accelerated_passes_every_case_it_answers_in_f32() {
    let suite = load::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors")).unwrap();
    let report = runner::run(&suite, &mut Accelerated, &Options::default()).unwrap();
    assert_eq!(report.dtype, "f32");
    // Including `fire-grad/kinks/*`: relu'(0) = 0 as [grad.kinks] requires (candle's own
    // `relu` backward takes 1, which these cases caught).
    check(
        &report,
        &[
            "fire-s/",
            "attention/",
            "alibi/",
            "kerple/",
            "nope/",
            "fire-grad/vjp/",
        ],
        72,
    );
}

/// No failure; every case of `families` passes; every skip says why; at least `min_passed`.
fn check(report: &runner::Report, families: &[&str], min_passed: usize) {
    let with = |s: Status| report.outcomes.iter().filter(move |o| o.status == s);
    let failed: Vec<&str> = with(Status::Failed).map(|o| o.id.as_str()).collect();
    assert!(
        failed.is_empty(),
        "unexpected failures {failed:?}: {}",
        report.summary()
    );
    for family in families {
        let all = report
            .outcomes
            .iter()
            .filter(|o| o.id.starts_with(family))
            .all(|o| o.status == Status::Passed);
        assert!(all, "{family} cases are not all passing");
    }
    for o in with(Status::Skipped) {
        assert!(
            !o.details.is_empty(),
            "{} is skipped without a reason",
            o.id
        );
    }
    let (passed, _, _) = report.counts();
    assert!(passed >= min_passed, "{}", report.summary());
}

/// The fast kernels (what `fire-lm` evaluates and trains with), driven in process: compiled
/// FIRE, fused attention, and the fused backward pass's FIRE gradient, against the same suite.
#[test]
fn fast_kernels_pass_every_case_they_answer_in_f32() {
    use fire_conformance::implementations::fast::Fast;
    let suite = load::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors")).unwrap();
    let report = runner::run(&suite, &mut Fast, &Options::default()).unwrap();
    // Every gradient case (the kinks and the threshold tie included) is answered by the
    // segment-sum backward, and the FIRE-S / baseline families are answered.
    check(
        &report,
        &["fire-grad/", "fire-s/", "alibi/", "kerple/", "nope/"],
        66,
    );
}
