//! What the diagnosis says for mistakes real code writes in a form the catalogue's literal one
//! is not: `log-without-plus-one` guarded at distance 0 (`ln(|c|·x + ε)`, two public copies),
//! and the entries added after the sixth audit, each named on the cases that show it.
//! spec: [num.diagnosis], [variants.catalogue]

#![allow(clippy::unwrap_used)] // tests may unwrap

mod common;

use common::{failed_ids, lines, run_in_process as run, Literal};
use fire_conformance::diagnose::describe;
use fire_conformance::implementation::{Capabilities, Implementation, Reply, Request};
use fire_conformance::implementations::mutant::{Arithmetic, Mutant};
use fire_conformance::implementations::reference::Reference;
use fire_conformance::runner;
use fire_conformance::vectors::format::{Encoding, Kind};

/// The guard of the "safe log", as in the public copies.
const GUARD: f64 = 1e-6;

/// FIRE with ψ(x) = ln(|c|·x + ε_g) in both terms (the "safe log" replacing `+ 1` by a small
/// guard): `log-without-plus-one` everywhere but at distance 0, where it is finite.
fn guarded_log() -> Literal {
    Literal {
        name: "guarded ln(|c|·x + ε)",
        psi: |c, x| (c.abs() * x + GUARD).ln(),
        threshold: |l| l,
    }
}

#[test]
fn log_without_plus_one_guarded_at_distance_zero_is_named_off_the_diagonal() {
    let report = run(&mut guarded_log(), &["fire/random-params/*"]);
    for id in [
        "fire/random-params/seed-1-square-16",
        "fire/random-params/seed-2-square-16",
    ] {
        let said = lines(&report, id).join("\n");
        assert!(
            said.contains("matches variant `log-without-plus-one` everywhere except the diagonal (i = j, distance 0)"),
            "{id}:\n{said}"
        );
        // Not the future-key region, which points at the wrong clause.
        assert!(
            !said.contains("on the keys after the query only"),
            "{id}:\n{said}"
        );
    }
}

#[test]
fn the_entries_of_the_sixth_audit_are_named_on_the_cases_that_show_them() {
    for (name, case) in [
        ("no-abs-c-in-distance", "edge/parameters/negative-c"),
        (
            "normalize-by-distance",
            "fire/random-params/seed-1-square-16",
        ),
        ("bias-dropped", "attention/causal/default-init-square-8"),
    ] {
        let mut imp = Mutant::new(Some(name), Arithmetic::F32).unwrap();
        let report = run(&mut imp, &[case]);
        let said = lines(&report, case);
        assert_eq!(
            said.first()
                .map(String::as_str)
                .unwrap_or_default()
                .split('(')
                .next(),
            Some(format!("diagnosis: matches variant `{name}` within f32 tolerance ").as_str()),
            "{name} on {case}:\n{}",
            said.join("\n")
        );
    }
}

/// Two independent mistakes, each showing on its own cases, as in the ReaLLMASIC nanoGPT forks:
/// |c| dropped in the distance's ψ (seen where c < 0) and ε guarded inside both logs (seen where
/// ε is large). Here each request takes one of them: the negative-c ones the first, the rest
/// the second.
struct TwoMistakes {
    negative_c: Mutant,
    otherwise: Mutant,
}

impl Implementation for TwoMistakes {
    fn capabilities(&mut self) -> fire_conformance::error::Result<Capabilities> {
        self.otherwise.capabilities()
    }

    fn run(&mut self, r: &Request) -> Reply {
        match &r.encoding {
            Encoding::Fire(p) if r.kind == Kind::Bias && p.c < 0.0 => self.negative_c.run(r),
            Encoding::Fire(_) if r.kind == Kind::Bias => self.otherwise.run(r),
            _ => Reply::Skipped("bias cases of one FIRE module only".into()),
        }
    }
}

#[test]
fn independent_mistakes_on_their_own_cases_are_named_together() {
    let mut imp = TwoMistakes {
        negative_c: Mutant::new(Some("no-abs-c-in-distance"), Arithmetic::F64).unwrap(),
        otherwise: Mutant::new(Some("eps-inside-psi"), Arithmetic::F64).unwrap(),
    };
    let report = run(&mut imp, &[]);
    assert_eq!(
        report.overall,
        Some(runner::Overall::Several(vec![
            "eps-inside-psi",
            "no-abs-c-in-distance"
        ])),
        "{}",
        fire_conformance::report::text::render(&report, false)
    );
    // One mistake alone is still named alone, never as a set.
    let mut one = Mutant::new(Some("eps-inside-psi"), Arithmetic::F64).unwrap();
    let report = run(&mut one, &[]);
    assert_eq!(report.overall_variants(), vec!["eps-inside-psi"]);
}

/// The reference, with every bias case's rows moved by a constant per head and query (as
/// Press et al.'s ALiBi code, `r·j`, moves −r·(i − j) by r·i), or, with `scale`, multiplied.
struct RowShifted {
    scale: bool,
}

impl Implementation for RowShifted {
    fn capabilities(&mut self) -> fire_conformance::error::Result<Capabilities> {
        Reference.capabilities()
    }

    fn run(&mut self, r: &Request) -> Reply {
        if r.kind != Kind::Bias {
            return Reply::Skipped("bias cases only".into());
        }
        let Reply::Output(mut out) = Reference.run(r) else {
            return Reply::Errored("the reference refused".into());
        };
        let bias = out.get_mut("bias").unwrap();
        let row = *bias.shape.last().unwrap();
        for (n, x) in bias.data.iter_mut().enumerate() {
            *x = if self.scale {
                *x * 1.5
            } else {
                *x + 0.37 * (1 + n / row) as f64
            };
        }
        Reply::Output(out)
    }
}

#[test]
fn a_bias_off_by_a_constant_per_query_row_is_said_to_leave_attention_unchanged() {
    let notes = |scale: bool| {
        let report = run(&mut RowShifted { scale }, &[]);
        let id = "alibi/standard/standard-8-heads";
        let o = report.outcomes.iter().find(|o| o.id == id).unwrap();
        assert_eq!(o.status, runner::Status::Failed, "{id}");
        let finding = o.finding.as_ref().unwrap();
        describe(finding, o.profile.unwrap()).join("\n")
    };
    let report = run(&mut RowShifted { scale: false }, &[]);
    assert_eq!(report.overall, Some(runner::Overall::RowShift));
    let shifted = notes(false);
    assert!(
        shifted.contains("plus a constant per query row") && shifted.contains("[alibi.bias]"),
        "{shifted}"
    );
    assert!(!notes(true).contains("constant per query row"));
}

/// A threshold of 511 where the spec's is 512 (a block size minus one): on the default cases,
/// whose queries are all below it, every input of f_θ is scaled by ψ(512)/ψ(511), a difference
/// along each row just over the f32 tolerance. Once each row's mean is taken off it fits the
/// tolerance, but it is no constant per row, and attention is not unchanged: not said so (it
/// had been).
#[test]
fn a_difference_that_varies_along_the_rows_is_not_called_a_row_shift() {
    let mut imp = Literal {
        name: "threshold 511 for 512",
        psi: |c, x| (c.abs() * x + 1.0).ln(),
        threshold: |l| l * 511.0 / 512.0,
    };
    let report = run(&mut imp, &["fire/default-init/*"]);
    let failed = failed_ids(&report);
    assert!(failed.contains(&"fire/default-init/square-8"), "{failed:?}");
    for id in &failed {
        let said = lines(&report, id).join("\n");
        assert!(!said.contains("constant per query row"), "{id}:\n{said}");
    }
    assert_ne!(report.overall, Some(runner::Overall::RowShift));
}

/// A mistake made on some inputs only: the threshold ignored where every query is below 20
/// (a short-sequence branch), the reference elsewhere.
struct OnShortInputs {
    mistaken: Mutant,
}

impl Implementation for OnShortInputs {
    fn capabilities(&mut self) -> fire_conformance::error::Result<Capabilities> {
        Reference.capabilities()
    }

    fn run(&mut self, r: &Request) -> Reply {
        match &r.encoding {
            Encoding::Fire(_) if r.kind == Kind::Bias => {
                if r.inputs.queries.iter().all(|&i| i < 20) {
                    self.mistaken.run(r)
                } else {
                    Reference.run(r)
                }
            }
            _ => Reply::Skipped("bias cases of one FIRE module only".into()),
        }
    }
}

#[test]
fn a_mistake_on_some_inputs_only_is_named_with_a_case_it_spared() {
    let mut imp = OnShortInputs {
        mistaken: Mutant::new(Some("threshold-ignored"), Arithmetic::F64).unwrap(),
    };
    let report = run(&mut imp, &[]);
    let Some(runner::Overall::SomeInputs { variant, passed }) = &report.overall else {
        panic!("{:?}", report.overall);
    };
    assert_eq!(*variant, "threshold-ignored");
    let spared = report.outcomes.iter().find(|o| &o.id == passed).unwrap();
    assert_eq!(spared.status, runner::Status::Passed);
    let text = fire_conformance::report::text::render(&report, false);
    assert!(text.contains("on some inputs only"), "{text}");
}

/// A clamped distance (keys after the query read f(0)) on every case, and tanh's GeLU on the
/// GeLU cases: the run names the clamp, says which failing cases it explains only loosely, and
/// does not advise declaring `negated` (the GeLU cases would still fail). spec: [proto.report]
struct ClampAndTanh {
    clamp: Mutant,
    both: Mutant,
}

impl Implementation for ClampAndTanh {
    fn capabilities(&mut self) -> fire_conformance::error::Result<Capabilities> {
        self.clamp.capabilities()
    }

    fn run(&mut self, r: &Request) -> Reply {
        let Encoding::Fire(p) = &r.encoding else {
            return Reply::Skipped("one FIRE module only".into());
        };
        if r.kind != Kind::Bias {
            return Reply::Skipped("bias cases only".into());
        }
        if p.mlp.activation != "gelu" {
            return self.clamp.run(r);
        }
        // The GeLU cases: the clamp's keys after the query, tanh's GeLU on the causal triangle.
        let (Reply::Output(mut a), Reply::Output(b)) = (self.clamp.run(r), self.both.run(r)) else {
            return Reply::Errored("a side failed".into());
        };
        let (q, k) = (&r.inputs.queries, &r.inputs.keys);
        let (bias, tanh) = (a.get_mut("bias").unwrap(), &b["bias"]);
        for (n, x) in bias.data.iter_mut().enumerate() {
            if k[n % k.len()] <= q[(n / k.len()) % q.len()] {
                *x = tanh.data[n];
            }
        }
        Reply::Output(a)
    }
}

#[test]
fn a_name_explaining_some_cases_only_loosely_says_so_and_no_declaration_is_advised() {
    use fire_conformance::overall::{loosely_explained, may_declare};
    let mut imp = ClampAndTanh {
        clamp: Mutant::new(Some("future-distance-clamped"), Arithmetic::F32).unwrap(),
        both: Mutant::new(Some("gelu-tanh"), Arithmetic::F32).unwrap(),
    };
    let report = run(&mut imp, &[]);
    let text = fire_conformance::report::text::render(&report, false);
    let loose = loosely_explained(&report);
    assert_eq!(
        report.overall_variants(),
        vec!["future-distance-clamped"],
        "{text}"
    );
    assert!(!loose.is_empty(), "{text}");
    assert!(
        loose.iter().all(|id| id.starts_with("fire/gelu/")),
        "{loose:?}"
    );
    assert!(text.contains("not within tolerance"), "{text}");
    assert_eq!(may_declare(&report), None, "{text}");
}

/// The reference with every output value rounded by `round`, declaring `dtype`.
struct Rounded {
    dtype: &'static str,
    round: fn(f64) -> f64,
}

impl Implementation for Rounded {
    fn capabilities(&mut self) -> fire_conformance::error::Result<Capabilities> {
        let mut c = Reference.capabilities()?;
        c.dtypes = vec![self.dtype.into()];
        Ok(c)
    }

    fn run(&mut self, r: &Request) -> Reply {
        match Reference.run(r) {
            Reply::Output(mut outs) => {
                for t in outs.values_mut() {
                    t.data.iter_mut().for_each(|x| *x = (self.round)(*x));
                }
                Reply::Output(outs)
            }
            other => other,
        }
    }
}

/// The reference rounded to float32 and returned as float64: at f64 every case whose output
/// float32 cannot hold fails, each said to agree within f32 tolerance, and the run says where
/// to look; no statement on subsets of the output ("agrees below L") is made from rounding.
fn rounded_to_f32() -> Rounded {
    Rounded {
        dtype: "f64",
        round: |x| f64::from(x as f32),
    }
}

#[test]
fn float32_arithmetic_returned_as_float64_is_said_to_agree_at_f32() {
    let report = run(&mut rounded_to_f32(), &[]);
    assert_eq!(report.dtype, "f64");
    let failed: Vec<&str> = report
        .outcomes
        .iter()
        .filter(|o| o.status == runner::Status::Failed && !o.id.starts_with("invalid/"))
        .map(|o| o.id.as_str())
        .collect();
    assert!(failed.len() > 20, "{failed:?}");
    for id in failed {
        let said = lines(&report, id).join("\n");
        assert!(
            said.contains("agrees with the reference within f32 tolerance, not within f64's"),
            "{id}: {said}"
        );
        assert!(
            !said.contains("agrees with the reference on"),
            "{id}: {said}"
        );
        assert!(!said.contains("no catalogued variant"), "{id}: {said}");
        // Rounding is no mistake of the keys after the query (query 0's one causal entry,
        // x = 0, rounds to itself).
        assert!(
            !said.contains("only keys after the query differ"),
            "{id}: {said}"
        );
    }
    assert_eq!(report.overall, Some(runner::Overall::Precision("f32")));
    // Both causes said for the run: a float32 step, or a mistake that small.
    let text = fire_conformance::report::text::render(&report, false);
    assert!(
        text.contains("or a mistake that small (an extra guard, a small constant added), which a run at `--dtype f32` passes too"),
        "{text}"
    );
}

/// A catalogued mistake in the bias and gradients of `c` off by a factor (the reference's, doubled).
struct MistakeAndGradients(Mutant);

impl Implementation for MistakeAndGradients {
    fn capabilities(&mut self) -> fire_conformance::error::Result<Capabilities> {
        self.0.capabilities()
    }

    fn run(&mut self, r: &Request) -> Reply {
        if r.kind != Kind::Vjp {
            return self.0.run(r);
        }
        match Reference.run(r) {
            Reply::Output(mut out) => {
                if let Some(c) = out.get_mut("c") {
                    c.data.iter_mut().for_each(|x| *x *= 2.0);
                }
                Reply::Output(out)
            }
            other => other,
        }
    }
}

/// A run naming one catalogued mistake whose gradient cases fail as well (diagnosed at f64 for
/// precision, at the defaults for another initial value) does not say that a second, smaller
/// difference shows on those gradient cases, which no variant predicts (audit 12).
#[test]
fn a_named_mistake_is_not_said_to_leave_a_second_difference_on_gradient_cases() {
    for arithmetic in [Arithmetic::F64, Arithmetic::F32] {
        let name = "normalize-by-key";
        let mut imp = MistakeAndGradients(Mutant::new(Some(name), arithmetic).unwrap());
        let report = run(&mut imp, &[]);
        assert_eq!(
            report.overall,
            Some(runner::Overall::Variants(vec![name])),
            "{arithmetic:?}"
        );
        let gradients = report
            .outcomes
            .iter()
            .filter(|o| o.id.starts_with("fire-grad/") && o.status == runner::Status::Failed)
            .count();
        assert!(gradients > 0, "{arithmetic:?}: no gradient case failed");
        let loose = fire_conformance::overall::loosely_explained(&report);
        assert!(
            !loose.iter().any(|id| id.starts_with("fire-grad/")),
            "{arithmetic:?}: {loose:?}"
        );
    }
}

/// The reference with keys after the query set to 0, declared `mirrored`.
struct FutureZeroed;

impl Implementation for FutureZeroed {
    fn capabilities(&mut self) -> fire_conformance::error::Result<Capabilities> {
        Reference.capabilities()
    }

    fn run(&mut self, r: &Request) -> Reply {
        let mut out = match Reference.run(r) {
            Reply::Output(out) if r.kind == Kind::Bias => out,
            other => return other,
        };
        let (q, k) = (&r.inputs.queries, &r.inputs.keys);
        for t in out.values_mut() {
            for (n, x) in t.data.iter_mut().enumerate() {
                if k[n % k.len()] > q[(n / k.len()) % q.len()] {
                    *x = 0.0;
                }
            }
        }
        Reply::Output(out)
    }
}

/// Only the declaration for keys after the query is wrong: the tiny-c cases say so, and not
/// that "a failure no variant explains points at how ψ or ε is computed" (audit 13).
#[test]
fn a_wrong_future_keys_declaration_is_not_blamed_on_psi_at_tiny_c() {
    let report = run(&mut FutureZeroed, &["edge/parameters/tiny-c*"]);
    let failed = failed_ids(&report);
    assert!(!failed.is_empty());
    for id in failed {
        let said = lines(&report, id).join("\n");
        assert!(
            said.contains("keys after the query follow `zero`"),
            "{id}: {said}"
        );
        assert!(!said.contains("how ψ or ε is computed"), "{id}: {said}");
    }
}

/// An f32 module whose f_θ runs under bfloat16 autocast: the reference rounded to bfloat16,
/// declared f32. Every failing case is said to agree within bf16's tolerance, as is the run
/// (it had been "no catalogued variant" on every case: audit 17).
#[test]
fn bfloat16_arithmetic_returned_as_float32_is_said_to_agree_at_bf16() {
    let mut bf16 = Rounded {
        dtype: "f32",
        round: |x| {
            let b = (x as f32).to_bits();
            f64::from(f32::from_bits(b.wrapping_add(0x8000) & !0xFFFF))
        },
    };
    let report = run(&mut bf16, &["fire/*"]);
    let failed = failed_ids(&report);
    assert!(failed.len() > 5, "{failed:?}");
    for id in failed {
        let said = lines(&report, id).join("\n");
        assert!(
            said.contains("agrees with the reference within bf16 tolerance, not within f32's"),
            "{id}: {said}"
        );
        assert!(!said.contains("no catalogued variant"), "{id}: {said}");
    }
    assert_eq!(report.overall, Some(runner::Overall::Precision("bf16")));
    // The same for float16 autocast: every value a float16's.
    let mut f16 = Rounded {
        dtype: "f32",
        round: |x| f64::from(half_rounded(x as f32)),
    };
    let report = run(&mut f16, &["fire/*"]);
    assert!(!failed_ids(&report).is_empty());
    assert_eq!(report.overall, Some(runner::Overall::Precision("bf16")));
}

/// `x` rounded to the nearest float16, as a float32 (normal range; smaller magnitudes to 0).
fn half_rounded(x: f32) -> f32 {
    if x.abs() < 2f32.powi(-14) {
        return 0.0;
    }
    f32::from_bits(x.to_bits().wrapping_add(0x1000) & !0x1FFF)
}

/// The reference rounded to float16's 11 significant bits, declared f32.
fn rounded_to_f16() -> Rounded {
    Rounded {
        dtype: "f32",
        round: |x| {
            let b = (x as f32).to_bits();
            f64::from(f32::from_bits(b.wrapping_add(0x1000) & !0x1FFF))
        },
    }
}

/// Half-precision rounding, which shows first where the values are largest (on some cases the
/// keys after the query), is not said to be a mistake that only shows at j > i (audit 13).
#[test]
fn half_precision_rounding_is_not_called_a_mistake_at_the_keys_after_the_query() {
    let report = run(&mut rounded_to_f16(), &["fire/*", "edge/*"]);
    let mut failing = 0;
    for o in &report.outcomes {
        if o.status != runner::Status::Failed || o.finding.is_none() {
            continue;
        }
        failing += 1;
        let said = lines(&report, &o.id).join("\n");
        assert!(
            !said.contains("has a mistake that only shows at j > i"),
            "{}: {said}",
            o.id
        );
    }
    assert!(failing > 10, "{failing}");
}

/// The reference (the bias added after the scaling) declaring `before-scaling`.
struct DeclaresBeforeScaling;

impl Implementation for DeclaresBeforeScaling {
    fn capabilities(&mut self) -> fire_conformance::error::Result<Capabilities> {
        let mut c = Reference.capabilities()?;
        c.placement = fire_conformance::implementation::Placement::BeforeScaling;
        Ok(c)
    }

    fn run(&mut self, r: &Request) -> Reply {
        Reference.run(r)
    }
}

/// Right maths, wrong placement declared: each attention case and the run say which
/// declaration the output follows, where they had said only "no catalogued variant"
/// (audit 13). spec: [attn.placement]
#[test]
fn a_wrong_placement_declaration_is_said_to_be_one() {
    let report = run(&mut DeclaresBeforeScaling, &["attention/*"]);
    let failed = failed_ids(&report);
    assert!(failed.len() >= 3, "{failed:?}");
    for id in failed {
        let said = lines(&report, id).join("\n");
        assert!(
            said.contains(
                "declared `before-scaling`: if that is what it does, declare `after-scaling`"
            ),
            "{id}: {said}"
        );
    }
    assert_eq!(
        report.overall,
        Some(runner::Overall::Placement(
            fire_conformance::implementation::Placement::AfterScaling
        ))
    );
}

/// The reference at positions one past the case's (`one-based-positions`, in gradients too).
struct OneBased;

impl Implementation for OneBased {
    fn capabilities(&mut self) -> fire_conformance::error::Result<Capabilities> {
        Reference.capabilities()
    }

    fn run(&mut self, r: &Request) -> Reply {
        let mut shifted = r.clone();
        for p in shifted
            .inputs
            .queries
            .iter_mut()
            .chain(shifted.inputs.keys.iter_mut())
        {
            *p += 1;
        }
        Reference.run(&shifted)
    }
}

/// A one-hot Jacobian row that one-based positions move past the threshold gets no gradient
/// for the multiplier (max(i + 1, L) takes i's branch): said with the forward's difference as a
/// cause, not as a multiplier detached (audit 36); a multiplier detached alone still is.
#[test]
fn a_zero_multiplier_gradient_beside_other_wrong_gradients_is_not_called_detached() {
    let report = run(&mut OneBased, &["fire-grad/jacobian/*"]);
    let said = lines(&report, "fire-grad/jacobian/jacobian-row-2").join("\n");
    assert!(
        said.contains("is zero, and other gradients differ too: where the forward differs"),
        "{said}"
    );
    assert!(
        !said.contains("is zero: the multiplier is detached"),
        "{said}"
    );
}

/// ψ computed in float16: its argument and its value rounded to 11 significant bits, and
/// ψ(max(L, i)) infinite once |c|·i + 1 passes float16's largest finite value (65 504).
fn psi_in_f16() -> Literal {
    fn half(x: f64) -> f64 {
        if x.abs() > 65_504.0 {
            return f64::INFINITY.copysign(x);
        }
        f64::from(half_rounded(x as f32))
    }
    Literal {
        name: "ψ in float16",
        psi: |c, x| half(half(half(c.abs() * x) + 1.0).ln()),
        threshold: |l| l,
    }
}

/// A module whose ψ overflows float16 at positions near 10⁶ returns f_θ(0) on the keys after
/// those queries, which is also what `psi-identity` and `future-distance-clamped` predict there:
/// said once, as what the case cannot tell apart, not as two claims each naming a mistake the
/// module does not have (audit 36's `T-half_psi`).
#[test]
fn variants_that_coincide_on_a_subset_are_not_each_named_on_it() {
    let report = run(&mut psi_in_f16(), &["edge/positions/large-positions"]);
    let said = lines(&report, "edge/positions/large-positions").join("\n");
    assert!(!said.contains("on the keys after the query only"), "{said}");
    assert!(
        said.contains("diagnosis: on the keys after the query the output is what variants `"),
        "{said}"
    );
    assert!(said.contains("this case cannot tell them apart"), "{said}");
}
