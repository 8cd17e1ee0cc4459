//! The report names what a run did not check: the flags only skipped cases carry, among the
//! cases of what the implementation computes. spec: [proto.report]

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::path::Path;

use fire_conformance::implementation::{Capabilities, Implementation, Reply, Request};
use fire_conformance::implementations::mutant::{Arithmetic, Mutant};
use fire_conformance::implementations::reference::Reference;
use fire_conformance::runner::{self, Options};
use fire_conformance::vectors::format::{Encoding, Kind};
use fire_conformance::vectors::load;

/// The reference for single FIRE modules' bias cases only, skipping `skip`'s.
struct Partial {
    skip: fn(&Request) -> bool,
}

impl Implementation for Partial {
    fn capabilities(&mut self) -> fire_conformance::error::Result<Capabilities> {
        Reference.capabilities()
    }

    fn run(&mut self, r: &Request) -> Reply {
        let fire = matches!(r.encoding, Encoding::Fire(_)) && r.kind == Kind::Bias;
        if !fire || (self.skip)(r) {
            return Reply::Skipped("not computed here".into());
        }
        Reference.run(r)
    }
}

fn unchecked(skip: fn(&Request) -> bool) -> Vec<String> {
    let suite = load::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors")).unwrap();
    runner::run(&suite, &mut Partial { skip }, &Options::default())
        .unwrap()
        .unchecked
}

#[test]
fn a_run_that_skips_the_large_positions_says_it_did_not_check_them() {
    // Everything a bias-only FIRE module computes: nothing unchecked, although attention,
    // gradients and the baselines were skipped (it computes none of them).
    assert_eq!(unchecked(|_| false), Vec::<String>::new());
    // A module that cannot build a square as wide as the largest position.
    let wide = |r: &Request| {
        r.inputs
            .queries
            .iter()
            .chain(&r.inputs.keys)
            .any(|&p| p >= 4096)
    };
    let got = unchecked(wide);
    assert!(got.iter().any(|f| f == "large-positions"), "{got:?}");
    assert!(
        got.iter().all(|f| f != "attention" && f != "baseline"),
        "{got:?}"
    );
}

/// A mutant that computes single FIRE modules' bias cases of one depth of f_θ only, as a
/// module built for that depth does.
struct OneDepth {
    mutant: Mutant,
    depth: usize,
}

impl Implementation for OneDepth {
    fn capabilities(&mut self) -> fire_conformance::error::Result<Capabilities> {
        self.mutant.capabilities()
    }

    fn run(&mut self, r: &Request) -> Reply {
        match &r.encoding {
            Encoding::Fire(p) if r.kind == Kind::Bias && p.mlp.layers.len() == self.depth + 1 => {
                self.mutant.run(r)
            }
            _ => Reply::Skipped("another depth".into()),
        }
    }
}

/// FIRE's catalogued mistakes of ψ, the threshold and the normaliser, which a module of either
/// depth can make ([fire.defaults]: both depths are first-class).
const DEPTH_FREE: &[&str] = &[
    "no-abs-c",
    "no-abs-threshold",
    "multiplier-ignored",
    "threshold-ignored",
    "threshold-as-min",
    "eps-missing",
    "eps-inside-log",
    "eps-on-threshold",
    "eps-as-floor",
    "log-without-plus-one",
    "positions-as-indices",
    "one-based-positions",
    "signed-distance",
];

#[test]
fn a_two_layer_module_meets_the_edge_conditions() {
    let suite = load::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors")).unwrap();
    // Honest, it is graded on every condition the one-layer cases carry (what it skips is the
    // other depths' configuration, never listed), except what only an adapter's limits or the
    // one-layer family's own cases hold.
    let mut honest = OneDepth {
        mutant: Mutant::new(None, Arithmetic::F64).unwrap(),
        depth: 2,
    };
    let report = runner::run(&suite, &mut honest, &Options::default()).unwrap();
    assert_eq!(report.counts_of(runner::Question::Values).1, 0);
    for flag in [
        "negative-c",
        "negative-multiplier",
        "threshold-boundary",
        "large-eps",
        "query-zero",
        "kv-cache",
        "non-contiguous",
        "unsorted",
        "large-positions",
        "tiny-c",
        "large-preactivations",
        "depth-0",
        "depth-2",
        "gelu",
        "ablation",
    ] {
        assert!(
            !report.unchecked.iter().any(|f| f == flag),
            "{flag}: {:?}",
            report.unchecked
        );
    }
    // What only one-layer cases carry is listed: a depth-2 module did not meet it.
    assert!(
        report.unchecked.iter().any(|f| f == "random-positions"),
        "{:?}",
        report.unchecked
    );
    // Each mistake of ψ, the threshold or the normaliser fails some two-layer case.
    for &name in DEPTH_FREE {
        for arithmetic in [Arithmetic::F32, Arithmetic::F64] {
            let mut imp = OneDepth {
                mutant: Mutant::new(Some(name), arithmetic).unwrap(),
                depth: 2,
            };
            let report = runner::run(&suite, &mut imp, &Options::default()).unwrap();
            let failed = report.counts_of(runner::Question::Values).1;
            assert!(
                failed > 0,
                "`{name}` in a two-layer module passes ({arithmetic:?})"
            );
        }
    }
}

/// The reference for FIRE bias cases, declaring how it meets position lists; with `.1`, an
/// adapter that errors on every case.
struct Declaring(fire_conformance::implementation::Positions, bool);

impl Implementation for Declaring {
    fn capabilities(&mut self) -> fire_conformance::error::Result<Capabilities> {
        Ok(Capabilities {
            positions: self.0,
            ..Reference.capabilities()?
        })
    }

    fn run(&mut self, r: &Request) -> Reply {
        if self.1 {
            return Reply::Errored("TypeError: __init__() got an unexpected keyword".into());
        }
        Partial { skip: |_| false }.run(r)
    }
}

#[test]
fn a_glue_that_gathers_from_the_square_is_told_the_lists_went_unexercised() {
    use fire_conformance::implementation::Positions;
    use fire_conformance::protocol::parse_hello;
    let suite = load::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors")).unwrap();
    let run = |p| runner::run(&suite, &mut Declaring(p, false), &Options::default()).unwrap();
    let square = run(Positions::Square);
    // Every graded case with a KV-cache row, gapped, unsorted or random positions.
    let want = square
        .outcomes
        .iter()
        .filter(|o| o.question == runner::Question::Values)
        .filter(|o| o.status == runner::Status::Passed)
        .filter(|o| {
            o.flags.iter().any(|f| {
                ["kv-cache", "non-contiguous", "unsorted", "random-positions"].contains(&f.as_str())
            })
        })
        .count();
    assert!(want >= 8, "{want}");
    assert_eq!(square.positions_from_square, want);
    let text = fire_conformance::report::text::render(&square, false);
    assert!(
        text.contains("the module was never called with only their new query rows"),
        "{text}"
    );
    assert_eq!(run(Positions::Lists).positions_from_square, 0);
    // A broken adapter computed nothing: nothing went through a gather either.
    let broken = runner::run(
        &suite,
        &mut Declaring(Positions::Square, true),
        &Options::default(),
    );
    assert_eq!(broken.unwrap().positions_from_square, 0);
    // The hello field, its default, and a clear error for an unknown value.
    let hello = |extra: &str| {
        parse_hello(&format!(
            r#"{{"type": "hello", "protocol": 1, "name": "x"{extra}}}"#
        ))
    };
    assert_eq!(hello("").unwrap().positions, Positions::Lists);
    let p = hello(r#", "positions": "square""#).unwrap().positions;
    assert_eq!(p, Positions::Square);
    let e = hello(r#", "positions": "grid""#).unwrap_err();
    assert!(e.contains("unknown positions `grid`"), "{e}");
}

/// The reference declaring bfloat16: its values graded at bf16's tolerance.
struct Bf16;

impl Implementation for Bf16 {
    fn capabilities(&mut self) -> fire_conformance::error::Result<Capabilities> {
        let mut c = Reference.capabilities()?;
        c.dtypes = vec!["bf16".into()];
        Ok(c)
    }

    fn run(&mut self, r: &Request) -> Reply {
        Reference.run(r)
    }
}

/// A correct bfloat16 implementation passes under the default `--fail-on both`: every invalid
/// case is graded at every dtype (a rejection does not depend on precision), where their f32
/// profile had left its validation verdict nothing to grade and the run exited 5 after every
/// value case passed (audit 13). spec: [vec.invalid], [proto.report]
#[test]
fn a_correct_bf16_implementation_passes_both_verdicts() {
    let suite = load::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors")).unwrap();
    let report = runner::run(&suite, &mut Bf16, &Options::default()).unwrap();
    assert_eq!(report.dtype, "bf16");
    let (invalid, graded) = report
        .outcomes
        .iter()
        .filter(|o| o.question == runner::Question::Validation)
        .fold((0, 0), |(n, g), o| {
            (n + 1, g + usize::from(o.status == runner::Status::Passed))
        });
    assert!(invalid > 20 && graded == invalid, "{graded} of {invalid}");
    assert!(!report.nothing_ran());
    assert_eq!(report.exit_code(), 0);
    // What bf16 cannot grade at all is said: every attention and gradient case needs f32 or
    // finer (a bf16 attention module with a mistake passes, and must be told why).
    let kinds: Vec<&str> = report.too_precise.iter().map(|t| t.kind).collect();
    assert_eq!(kinds, ["attention", "gradient"], "{:?}", report.too_precise);
    let text = fire_conformance::report::text::render(&report, false);
    assert!(
        text.contains("not checked: the attention cases: all ")
            && text.contains("finer than this run's bf16, so none was graded"),
        "{text}"
    );
}

/// The reference for FIRE bias cases, saying `.0` of the module behind it across calls.
struct Stated(fire_conformance::implementation::State);

impl Implementation for Stated {
    fn capabilities(&mut self) -> fire_conformance::error::Result<Capabilities> {
        Ok(Capabilities {
            state: self.0,
            ..Reference.capabilities()?
        })
    }

    fn run(&mut self, r: &Request) -> Reply {
        Partial { skip: |_| false }.run(r)
    }
}

/// A glue that builds a module for each case (`state: fresh`, the kit's default) is told that a
/// cache a parameter update leaves stale never showed (audit 36: a per-instance cache passed
/// with nothing said); one whose module was stepped first, or that says nothing, is not.
#[test]
fn a_glue_building_a_module_per_case_is_told_its_state_went_unexercised() {
    use fire_conformance::implementation::State;
    let suite = load::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors")).unwrap();
    let said = |state| {
        let report = runner::run(&suite, &mut Stated(state), &Options::default()).unwrap();
        fire_conformance::report::text::render(&report, false)
    };
    let line = "not checked: the module across a parameter update: each case was computed by a \
                module built for it (`state: fresh`)";
    assert!(said(State::Fresh).contains(line), "{}", said(State::Fresh));
    assert!(!said(State::Stepped).contains(line));
    assert!(!said(State::Unsaid).contains(line));
}
