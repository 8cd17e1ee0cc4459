//! The run-level verdict on the values ([`Overall`]): a broken adapter, the catalogued
//! variants consistent with every diagnosable case, or, where none is, what the failures share.
//! spec: [proto.report], [variants.catalogue]

use std::collections::BTreeMap;

use crate::compare::Profile;
use crate::diagnose::{self, Subset};
use crate::implementation::{Capabilities, FutureKeys};
use crate::runner::{Outcome, Question, Status};
use crate::vectors::format::{Case, Kind, Tensor};

mod carried;
mod combined;
mod future;
mod named;
mod replies;
mod shared;
pub use named::{loosely_explained, may_declare};
pub(crate) use replies::{broken_adapter, glue_found};
use shared::{carried, held_positions, other_initial, stored};

/// The run-level judgement of the values.
#[derive(Debug, Clone, PartialEq)]
pub enum Overall {
    /// Named variants consistent with every diagnosable case that ran, each explaining at least
    /// one failure (empty: no single variant does).
    Variants(Vec<&'static str>),
    /// No variant explains the failures, and every failing case passes under this convention
    /// for keys after the query, not the declared one: a declaration to fix, not the maths.
    /// spec: [conv.future]
    Convention(FutureKeys),
    /// No variant explains the failures, and every failing case is an attention case that
    /// passes with the bias entering the logits here, not where the implementation declared:
    /// a declaration to fix. spec: [attn.placement]
    Placement(crate::implementation::Placement),
    /// No variant explains the failures, and every failing case is a gradient case: the forward
    /// values checked are right, the gradients of `params` are not. spec: [grad.vjp]
    Gradients {
        /// The parameters whose gradients fail, in the order first met.
        params: Vec<String>,
        /// Whether the implementation's gradients hold NaN where the expected ones are finite:
        /// a NaN in its forward pass (at keys after the query, say, under `negated`) reaches
        /// every gradient through 0·NaN even where the cotangent is 0.
        nan: bool,
        /// Whether every failing gradient is missing from its reply or shaped otherwise than the
        /// case's (a misspelt name, a weight as `[in, out]`): no value was found wrong.
        layout: bool,
    },
    /// No single variant explains the failures, but two do, one on each side of the diagonal:
    /// `causal` on the keys at or before the query, `future` on the keys after it (a module
    /// with one mistake in its normaliser and another in how it treats keys after the query).
    /// spec: [variants.catalogue], [conv.future]
    Regions {
        /// The variant the causal triangle follows.
        causal: &'static str,
        /// The variant the keys after the query follow.
        future: &'static str,
    },
    /// No single variant explains the failures, but a few do between them: each
    /// failing case matches one of them whole, and each agrees with every passing case — a
    /// module with independent mistakes, each showing on its own cases (|c| dropped where c is
    /// negative, ε misplaced where ε is large). spec: [variants.catalogue]
    Several(Vec<&'static str>),
    /// Every failing case matches `variant` whole, but the variant would also have changed a
    /// case that passed (`passed`, the first): the module makes that mistake on some inputs
    /// only — one branch of its code, one setting (T5's bidirectional flag honoured in one
    /// call and not another). spec: [variants.catalogue]
    SomeInputs {
        /// The variant every failing case matches.
        variant: &'static str,
        /// A case that passed although the variant changes it.
        passed: String,
    },
    /// No single variant explains the failures, but `variant` does together with other initial
    /// values: every failing diagnosable case off [fire.defaults] matches it whole, every one
    /// at the defaults matches it evaluated with `values` (the distinct ones, as
    /// [`Overall::OtherInitial`] names them), and it agrees with every passing case — a module
    /// with that mistake whose constructor also starts a scalar elsewhere. spec:
    /// [variants.catalogue], [fire.defaults]
    VariantAndInitial {
        /// The variant.
        variant: &'static str,
        /// The initial values it needs at the defaults.
        values: Vec<crate::initial::OtherInitial>,
    },
    /// Every failing case is at [fire.defaults]' initial values and is the reference's with
    /// one of them changed: the module starts those (the distinct ones, in the order first
    /// met) elsewhere than the spec. spec: [fire.defaults]
    OtherInitial(Vec<crate::initial::OtherInitial>),
    /// Every failing case is an f64 case that agrees with the reference within this looser
    /// profile's tolerance: a step computed at lower precision. spec: [num.profiles]
    Precision(&'static str),
    /// Every failing case is the reference's with FIRE's parameters rounded to this storage
    /// ([`diagnose::Stored`]), or agrees with it within that storage's precision (`within`
    /// cases: a gradient whose rounding the storage does not reproduce value for value): the
    /// module holds them at a lower precision than it computes in. spec: [num.profiles]
    Stored {
        /// The storage, and which parameters it holds.
        stored: diagnose::Stored,
        /// How many failing cases agree within its precision without matching it exactly.
        within: usize,
    },
    /// Every failing case is the reference's at its positions held so
    /// ([`diagnose::Finding::positions`]). spec: [conv.positions]
    Positions(diagnose::HeldPositions),
    /// Failing cases repeat exactly the output of an earlier case with another f_θ
    /// ([`diagnose::Finding::carried`]): a result carried from one call to the next.
    /// spec: [fire.bias]
    Carried {
        /// How many value cases failed.
        failed: usize,
        /// How many failing cases repeat an earlier one.
        count: usize,
        /// The first of them.
        case: String,
        /// The earlier case whose output it repeats.
        from: String,
    },
    /// Every failing case is, on its causal triangle, the expected bias plus a constant per
    /// query row: attention is unchanged, the bias values are not (Press et al.'s ALiBi `r·j`).
    /// spec: [alibi.bias], [attn.logits]
    RowShift,
    /// Every valid case that ran errored (or broke): the adapter, not the maths, is at fault.
    /// Holds the error common to most of them and how many valid cases ran.
    AdapterBroken {
        /// The most frequent error message.
        error: String,
        /// How many valid cases gave exactly it.
        count: usize,
        /// How many valid cases ran.
        ran: usize,
    },
    /// No variant explains the failures, and every failing bias case agrees with the reference
    /// on its causal triangle (keys at or before the query) and differs at keys after it, the
    /// other failing cases FIRE gradient cases, whose cotangent reaches those keys under the
    /// declared `mirrored`: a mistake only at j > i (a bias computed on the triangle and
    /// transposed above it normalises by the key there), or a module that means something
    /// else there and may declare `negated`. spec: [conv.future]
    FutureOnly {
        /// How many failing gradient cases there are beside the bias cases.
        gradients: usize,
    },
    /// Every failing value case is one where the glue's own checks found the module wrong
    /// ([`crate::implementation::Reply::Mistake`]): what they said most often, and in how many.
    /// spec: [proto.reply]
    GlueFound(GlueFinding),
}

/// What the glue's own checks found on the failing value cases that are its findings
/// ([`crate::implementation::Reply::Mistake`]), which the catalogue does not diagnose (there is
/// no output to compare): the run's [`Overall::GlueFound`] where they are every failure, else
/// said beside the diagnosis of the others ([`crate::runner::Report::glue_found_partly`]).
/// spec: [proto.reply], [proto.report]
#[derive(Debug, Clone, PartialEq)]
pub struct GlueFinding {
    /// The first message of the most frequent kind (its error type, the text before its
    /// first `": "`): cases finding the same mistake differ in their figures.
    pub message: String,
    /// How many failing cases gave a message of that kind.
    pub count: usize,
    /// Whether they all gave exactly `message`.
    pub same: bool,
    /// How many failing value cases the glue found wrong, of every kind.
    pub found: usize,
    /// How many value cases failed.
    pub failed: usize,
}

/// One valid case that ran and gave an output: what it is, what came back, how it was graded.
pub(crate) struct Ran<'a> {
    pub(crate) outcome: usize,
    pub(crate) case: &'a Case,
    pub(crate) got: BTreeMap<String, Tensor>,
    pub(crate) profile: Profile,
    /// Whether some catalogued variant applies ([`diagnose::diagnosable`]).
    pub(crate) diagnosable: bool,
}

/// Diagnoses every failing diagnosable case, then names the variants consistent with every
/// diagnosable case that ran and explaining at least one failure; failing that, what the
/// failures have in common ([`unexplained`]). spec: [variants.catalogue]
pub(crate) fn diagnose_run(
    outcomes: &mut [Outcome],
    ran: &[Ran],
    caps: &Capabilities,
) -> Option<Overall> {
    let failed: Vec<bool> = ran
        .iter()
        .map(|r| matches!(outcomes[r.outcome].status, Status::Failed | Status::XFailed))
        .collect();
    if !failed.contains(&true) {
        return None;
    }
    let predicted: Vec<Vec<diagnose::Prediction>> = ran
        .iter()
        .map(|r| diagnose::predictions(r.case, caps))
        .collect();
    let mut explained: Vec<&'static str> = Vec::new();
    for ((r, p), &failing) in ran.iter().zip(&predicted).zip(&failed) {
        // A bias case no variant applies to still gets what the diagnosis can say without
        // one (where it agrees with the reference, a constant per query row).
        // A gradient case at the defaults still gets whether another initial value explains
        // it ([`crate::initial`]), and one at f64 or f32 whether it holds at a lower precision's tolerance.
        if failing
            && (r.diagnosable
                || r.case.kind == Kind::Bias
                || crate::initial::at_defaults(r.case)
                || matches!(r.profile.name, "f64" | "f32"))
        {
            let f = diagnose::diagnose(r.case, &r.got, r.profile, caps, p);
            explained.extend(f.variants.iter().map(|v| v.name));
            explained.extend(f.closest.map(|(v, _)| v.name));
            outcomes[r.outcome].finding = Some(f);
        }
    }
    // An output repeating an earlier case's: said on the case, diagnosed or not.
    for (r, earlier) in ran.iter().zip(carried::carried_over(ran, &failed, caps)) {
        if let Some(q) = earlier {
            let id = outcomes[ran[q].outcome].id.clone();
            outcomes[r.outcome]
                .finding
                .get_or_insert_with(Default::default)
                .carried = Some(id);
        }
    }
    // Failing FIRE cases off the defaults: another initial value does not explain them.
    let off_defaults = ran
        .iter()
        .zip(&failed)
        .filter(|(r, &failing)| {
            failing && r.case.encoding.is_fire() && !crate::initial::at_defaults(r.case)
        })
        .count();
    for r in ran {
        if let Some(f) = outcomes[r.outcome].finding.as_mut() {
            if !f.other_initial.is_empty() {
                f.failing_off_defaults = off_defaults;
            }
        }
    }
    // How far the output is from a variant's prediction for a case, in tolerance units.
    let distance_to = |r: &Ran, prediction: &BTreeMap<String, Tensor>| {
        diagnose::distance(
            r.case,
            prediction,
            &r.got,
            r.profile,
            crate::conventions::future_keys(r.case, caps),
            None,
        )
    };
    // Whether a prediction differs from the case's expected values beyond the tolerance.
    let predicts_failure = |r: &Ran, prediction: &BTreeMap<String, Tensor>| {
        r.case.expected.as_ref().is_some_and(|expected| {
            !diagnose::agrees(
                r.case,
                prediction,
                expected,
                r.profile,
                crate::conventions::future_keys(r.case, caps),
                None,
            )
        })
    };
    let consistent = |name: &str| {
        ran.iter()
            .zip(&predicted)
            .zip(&failed)
            .filter(|((r, _), _)| r.diagnosable)
            .all(|((r, p), &failing)| {
                match p.iter().find(|(v, _)| v.name == name) {
                    // On a failing case the variant must also predict a failure: one that
                    // computes the reference there (a GeLU entry on a ReLU-only case) cannot
                    // explain it, however near the loose band puts the output.
                    Some((_, Some(prediction))) => {
                        diagnose::consistent(distance_to(r, prediction), r.profile)
                            && (!failing || predicts_failure(r, prediction))
                    }
                    // The variant applies but cannot evaluate the case: it explains nothing here.
                    Some((_, None)) => false,
                    // The variant does not touch this case: it predicts the reference.
                    None => !failing,
                }
            })
    };
    let mut names: Vec<&'static str> = Vec::new();
    for v in fire_reference::variants::CATALOGUE {
        if explained.contains(&v.name) && !names.contains(&v.name) && consistent(v.name) {
            names.push(v.name);
        }
    }
    if names.is_empty() {
        // The first passing diagnosable case a variant does not predict within tolerance (a
        // mistake the module makes everywhere cannot hide on a case it would change).
        let passing_disagree = |name: &str| {
            ran.iter()
                .zip(&predicted)
                .zip(&failed)
                .filter(|((r, _), failing)| !**failing && r.diagnosable)
                .find(|((r, p), _)| match p.iter().find(|(v, _)| v.name == name) {
                    Some((_, Some(prediction))) => {
                        !diagnose::consistent(distance_to(r, prediction), r.profile)
                    }
                    Some((_, None)) => true,
                    None => false,
                })
                .map(|((r, _), _)| outcomes[r.outcome].id.clone())
        };
        let passing_agree = |name: &str| passing_disagree(name).is_none();
        return Some(match unexplained(outcomes, ran, &failed, caps) {
            Overall::Variants(none) if none.is_empty() => {
                if let Some(c) = carried(outcomes, ran, &failed) {
                    c
                } else if let Some(values) = other_initial(outcomes, ran, &failed) {
                    Overall::OtherInitial(values)
                } else if let Some(held) = held_positions(outcomes, ran, &failed) {
                    Overall::Positions(held)
                } else if let Some((stored, within)) = stored(outcomes, ran, &failed) {
                    Overall::Stored { stored, within }
                } else if let Some(p) = failing_findings(outcomes, ran, &failed)
                    .and_then(|f| f.iter().map(|f| f.precision).collect::<Option<Vec<_>>>())
                    // The widest a case needs: every failing case agrees within it.
                    .and_then(|p| {
                        p.iter()
                            .copied()
                            .find(|&p| p == "bf16")
                            .or(p.first().copied())
                    })
                {
                    Overall::Precision(p)
                } else if let Some((causal, future)) = two_regions(outcomes, ran, &failed) {
                    Overall::Regions { causal, future }
                } else if let Some(names) = several(outcomes, ran, &failed, passing_agree) {
                    Overall::Several(names)
                } else if let Some((variant, values)) =
                    combined::variant_and_initial(outcomes, ran, &failed, caps, passing_agree)
                {
                    Overall::VariantAndInitial { variant, values }
                } else if let Some((variant, passed)) =
                    one_covers(outcomes, ran, &failed).and_then(|v| Some((v, passing_disagree(v)?)))
                {
                    Overall::SomeInputs { variant, passed }
                } else if every_failing(outcomes, ran, &failed, |f| {
                    f.catalogued && f.row_shift != Some(false)
                }) && ran.iter().zip(&failed).any(|(r, f)| {
                    *f && outcomes[r.outcome]
                        .finding
                        .as_ref()
                        .is_some_and(|f| f.row_shift == Some(true))
                }) {
                    Overall::RowShift
                } else if let Some(gradients) = future::future_only(outcomes, ran, &failed, caps) {
                    Overall::FutureOnly { gradients }
                } else {
                    Overall::Variants(none)
                }
            }
            other => other,
        });
    }
    // Of variants that all stay within the loose tolerance, one may match a failing case
    // within the grading tolerance where another is clearly off (GeLU against its tanh form in
    // f32): the latter is dropped. Variants the cases cannot tell apart are all kept.
    let distance = |name: &str, r: &Ran, p: &[diagnose::Prediction]| {
        p.iter()
            .find(|(v, _)| v.name == name)
            .and_then(|(_, prediction)| prediction.as_ref())
            .map_or(f64::INFINITY, |prediction| distance_to(r, prediction))
    };
    let beaten = |b: &str| {
        names.iter().any(|&a| {
            a != b
                && ran
                    .iter()
                    .zip(&predicted)
                    .zip(&failed)
                    .filter(|((r, _), failing)| **failing && r.diagnosable)
                    .any(|((r, p), _)| {
                        distance(a, r, p) <= 1.0 && distance(b, r, p) > diagnose::CLEAR
                    })
        })
    };
    let kept: Vec<&'static str> = names.iter().copied().filter(|b| !beaten(b)).collect();
    if !kept.is_empty() {
        names = kept;
    }
    Some(Overall::Variants(names))
}

/// How many value cases failed (expected failures included).
fn failed_values(outcomes: &[Outcome]) -> usize {
    outcomes
        .iter()
        .filter(|o| {
            o.question == Question::Values && matches!(o.status, Status::Failed | Status::XFailed)
        })
        .count()
}

/// The cases that ran and failed (`failed`, per case of `ran`).
fn failing_runs<'r, 'a>(ran: &'r [Ran<'a>], failed: &[bool]) -> Vec<&'r Ran<'a>> {
    ran.iter()
        .zip(failed)
        .filter(|(_, f)| **f)
        .map(|(r, _)| r)
        .collect()
}

/// The findings of the failing cases, when every failed value case gave an output and was
/// diagnosed (the run-level readings below speak of every failure or of none).
fn failing_findings<'a>(
    outcomes: &'a [Outcome],
    ran: &[Ran],
    failed: &[bool],
) -> Option<Vec<&'a diagnose::Finding>> {
    let findings: Vec<&diagnose::Finding> = ran
        .iter()
        .zip(failed)
        .filter(|(_, f)| **f)
        .filter_map(|(r, _)| outcomes[r.outcome].finding.as_ref())
        .collect();
    (!findings.is_empty() && findings.len() == failed_values(outcomes)).then_some(findings)
}

/// Per failing case, the variants it matches whole ([`failing_findings`]).
fn matched_by_failing(
    outcomes: &[Outcome],
    ran: &[Ran],
    failed: &[bool],
) -> Option<Vec<Vec<&'static str>>> {
    let findings = failing_findings(outcomes, ran, failed)?;
    Some(
        findings
            .iter()
            .map(|f| f.variants.iter().map(|v| v.name).collect())
            .collect(),
    )
}

/// Two variants that together explain every failing case, one per side of the diagonal
/// ([`Overall::Regions`]), from the cases' own diagnoses: in every failing case the causal
/// triangle follows `causal` (a match there or everywhere) unless the whole case follows
/// `future`, and the keys after the query follow `future` (a match there, off the diagonal or
/// everywhere) unless the whole case follows `causal`; and some case shows both at once. Only
/// when every failed value case was diagnosed.
fn two_regions(
    outcomes: &[Outcome],
    ran: &[Ran],
    failed: &[bool],
) -> Option<(&'static str, &'static str)> {
    let diagnosed = failing_findings(outcomes, ran, failed)?;
    let whole = |f: &diagnose::Finding, v: &str| f.variants.iter().any(|w| w.name == v);
    let on = |f: &diagnose::Finding, v: &str, subsets: &[Subset]| {
        f.partial
            .iter()
            .any(|(w, s)| w.name == v && subsets.contains(s))
    };
    let causal_side = [Subset::Causal];
    let future_side = [Subset::Future, Subset::OffDiagonal];
    let explains = |a: &str, b: &str| {
        diagnosed.iter().all(|f| {
            (whole(f, a) || on(f, a, &causal_side) || whole(f, b))
                && (whole(f, b) || on(f, b, &future_side) || whole(f, a))
        })
    };
    diagnosed.iter().find_map(|f| {
        f.partial
            .iter()
            .filter(|(_, s)| causal_side.contains(s))
            .flat_map(|(a, _)| {
                f.partial
                    .iter()
                    .filter(|(_, s)| future_side.contains(s))
                    .map(move |(b, _)| (a.name, b.name))
            })
            .find(|&(a, b)| a != b && explains(a, b))
    })
}

/// Whether every failed value case was diagnosed and its finding satisfies `holds`.
fn every_failing(
    outcomes: &[Outcome],
    ran: &[Ran],
    failed: &[bool],
    holds: impl Fn(&diagnose::Finding) -> bool,
) -> bool {
    failing_findings(outcomes, ran, failed).is_some_and(|f| f.into_iter().all(holds))
}

/// The first catalogued variant (in the catalogue's order) that every failing case matches
/// whole, when every failed value case was diagnosed.
fn one_covers(outcomes: &[Outcome], ran: &[Ran], failed: &[bool]) -> Option<&'static str> {
    let matched = matched_by_failing(outcomes, ran, failed)?;
    fire_reference::variants::CATALOGUE
        .iter()
        .map(|v| v.name)
        .find(|n| matched.iter().all(|m| m.contains(n)))
}

/// The most variants [`several`] names: beyond that the catalogue would "explain" anything.
const MOST: usize = 3;

/// Two or three variants that between them explain every failing case, each failing case
/// matching one of them whole and each of them agreeing with every passing case
/// (`passing_agree`), chosen greedily (the one explaining most of what is left, the
/// catalogue's order breaking ties). Only when every failed value case was diagnosed with a
/// whole match.
fn several(
    outcomes: &[Outcome],
    ran: &[Ran],
    failed: &[bool],
    passing_agree: impl Fn(&str) -> bool,
) -> Option<Vec<&'static str>> {
    let matched = matched_by_failing(outcomes, ran, failed)?;
    if matched.iter().any(Vec::is_empty) {
        return None;
    }
    let candidates: Vec<&'static str> = fire_reference::variants::CATALOGUE
        .iter()
        .map(|v| v.name)
        .filter(|n| matched.iter().any(|m| m.contains(n)) && passing_agree(n))
        .collect();
    let mut left: Vec<&Vec<&'static str>> = matched.iter().collect();
    let mut chosen = Vec::new();
    while !left.is_empty() && chosen.len() < MOST {
        let covers = |n: &str| left.iter().filter(|m| m.contains(&n)).count();
        let best = candidates.iter().copied().filter(|n| covers(n) > 0).fold(
            None,
            |best: Option<&str>, n| match best {
                Some(b) if covers(b) >= covers(n) => Some(b),
                _ => Some(n),
            },
        )?;
        left.retain(|m| !m.contains(&best));
        chosen.push(best);
    }
    (left.is_empty() && chosen.len() >= 2).then_some(chosen)
}

/// The run's verdict when no catalogued variant explains its failures, where the failing cases
/// still have something in common: every one passes under another convention for keys after
/// the query ([`Overall::Convention`]), or every one is a gradient case ([`Overall::Gradients`]).
/// Only when every failed value case gave an output (none errored or broke).
fn unexplained(outcomes: &[Outcome], ran: &[Ran], failed: &[bool], caps: &Capabilities) -> Overall {
    let failing = failing_runs(ran, failed);
    if failing.is_empty() || failing.len() != failed_values(outcomes) {
        return Overall::Variants(vec![]);
    }
    let passes_under = |future: FutureKeys| {
        let under = Capabilities {
            future_keys: future,
            ..caps.clone()
        };
        failing
            .iter()
            .all(|r| crate::grade::differing_outputs(r.case, &r.got, r.profile, &under).is_empty())
    };
    let other = [FutureKeys::Mirrored, FutureKeys::Zero, FutureKeys::Masked]
        .into_iter()
        .filter(|f| *f != caps.future_keys)
        .find(|f| passes_under(*f));
    if let Some(f) = other {
        return Overall::Convention(f);
    }
    // The same for where the bias enters the logits: every failing case an attention case that
    // passes under the other placement.
    let placed: Option<Vec<_>> = failing
        .iter()
        .map(|r| diagnose::other_placement(r.case, &r.got, r.profile, caps))
        .collect();
    if let Some(&[p, ref rest @ ..]) = placed.as_deref() {
        if rest.iter().all(|q| *q == p) {
            return Overall::Placement(p);
        }
    }
    if failing.iter().all(|r| r.case.kind == Kind::Vjp) {
        // Every failing gradient the reference's with another initial value (c starting at
        // −0.1: the bias the same, the gradient of c negated): that, not a wrong gradient path.
        if let Some(values) = other_initial(outcomes, ran, failed) {
            return Overall::OtherInitial(values);
        }
        if let Some(held) = held_positions(outcomes, ran, failed) {
            return Overall::Positions(held);
        }
        // Every failing gradient the reference's at parameters held at a lower precision.
        if let Some((stored, within)) = stored(outcomes, ran, failed) {
            return Overall::Stored { stored, within };
        }
        let mut params: Vec<String> = Vec::new();
        let (mut nan, mut layout) = (false, true);
        for r in &failing {
            let expected = crate::grade::expected_for(r.case, caps);
            for name in crate::grade::differing_outputs(r.case, &r.got, r.profile, caps) {
                let got = r.got.get(&name);
                nan |= got.is_some_and(|t| t.data.iter().any(|v| v.is_nan()));
                // Missing, or of another shape.
                let want = expected.and_then(|e| e.get(&name));
                layout &= match (got, want) {
                    (None, _) => true,
                    (Some(g), Some(w)) => !crate::grade::same_layout(g, w),
                    (Some(_), None) => false,
                };
                if !params.contains(&name) {
                    params.push(name);
                }
            }
        }
        return Overall::Gradients {
            params,
            nan,
            layout,
        };
    }
    Overall::Variants(vec![])
}
