//! Diagnosis: when a case fails, which catalogued deviation does the output match, and where?
//!
//! Every entry of `fire_reference::variants::CATALOGUE` that applies to the case's encoding and
//! kind is evaluated on the case's own parameters and positions and compared with the
//! implementation's output under the case's tolerance and the declared conventions; a new
//! catalogue entry is diagnosed without any change here. A match is element by element with
//! [`crate::compare::element_ok`]: finite elements within tolerance, non-finite elements
//! identical, so a deviation that yields NaN is recognised by its NaN pattern. When no entry
//! matches the whole output, the output is compared on named subsets (the causal triangle, the
//! keys after the query, the queries either side of the threshold L) with the reference and with
//! every entry, so a partial match is said as one. spec: [variants.catalogue]

use std::collections::BTreeMap;

use fire_reference::variants::{Deviation, Variant, CATALOGUE};

use crate::compare::{excess_ratio, Profile};
use crate::conventions::{adjust, as_declared, future_keys, MASK_CEILING};
use crate::grade::same_layout;
use crate::implementation::{Capabilities, FutureKeys};
use crate::implementations::reference::evaluate_placed;
use crate::initial::{self, OtherInitial};
use crate::vectors::flags::Flag;
use crate::vectors::format::{Case, Encoding, Kind, Tensor, Verdict};

mod explanations;
mod positions;
mod stored;
mod subset;

pub(crate) use explanations::other_placement;
pub use explanations::placement_words;
use explanations::{gradient_of_l, lower_precision, negated_gradients, row_shifted};
use positions::held_positions;
pub use positions::HeldPositions;
use stored::lower_storage;
pub use stored::{Stored, Which};
use subset::subsets;
pub use subset::Subset;

/// What diagnosis found for one failing case.
#[derive(Debug, Clone, Default)]
pub struct Finding {
    /// Every catalogued variant whose output matches the implementation's everywhere.
    pub variants: Vec<&'static Variant>,
    /// When none matches within tolerance: the variant clearly closest to the output (within
    /// the loose tolerance, and [`CLEAR`] times closer than the reference and every other variant),
    /// with its distance in units of the tolerance.
    pub closest: Option<(&'static Variant, f64)>,
    /// Variants that match on a named subset only, where the reference does not.
    pub partial: Vec<(&'static Variant, Subset)>,
    /// Named subsets on which the output agrees with the reference (the failure lies elsewhere).
    pub agrees_on: Vec<Subset>,
    /// Convention hints (keys after the query) and notes on the case's construction.
    pub notes: Vec<String>,
    /// Whether, on the causal triangle, the output is the expected bias plus a constant per
    /// query row (softmax-invariant), the reference itself not matching there; `None` where the
    /// case cannot tell (no row with two causal keys, or a variant matched).
    pub row_shift: Option<bool>,
    /// On a case at [fire.defaults]: the initial values other than the spec's with which the
    /// reference reproduces the output, of one scalar, in the order tried (several where the
    /// case's positions do not tell them apart) ([`crate::initial`]).
    pub other_initial: Vec<OtherInitial>,
    /// Failing value cases off [fire.defaults], where the case sets every scalar itself, in the
    /// same run: where there are any, another initial value explains only part of the failure.
    pub failing_off_defaults: usize,
    /// When nothing else explains an f64 or f32 case: the narrowest lower precision (`f32`,
    /// `bf16`) within whose tolerance the output is the reference's — a step computed in it
    /// though a wider dtype is returned (an f32 module under bfloat16 autocast), or a mistake
    /// no larger than its rounding. The statements on subsets are not made then:
    /// at that size they describe the rounding, not a mistake ("agrees below L" on one query).
    pub precision: Option<&'static str>,
    /// When no variant explains a FIRE case: the storage below the profile (float16, …) in
    /// which the case's parameters, rounded, make the reference reproduce the output — a
    /// module holding its parameters at a lower precision than it computes in. Tried before
    /// [`Self::precision`], which it then leaves unset.
    pub stored: Option<Stored>,
    /// When no variant explains a FIRE bias or gradient case: how the module held the case's
    /// positions, where the reference at positions so held reproduces the output (clamped to
    /// a table's last entry, `positions.clamp(max=511)`; rounded to a 16-bit float).
    pub positions: Option<HeldPositions>,
    /// The id of an earlier case of the run whose output this failing one's repeats exactly,
    /// though that case has another f_θ and expects other values: a result carried from one
    /// case to the next (a cache keyed on the length alone, kept across module instances).
    /// Set by the run's diagnosis, which sees every case. spec: [fire.bias]
    pub carried: Option<String>,
    /// Whether the catalogue was consulted: some variant applies to the case, or it is a bias
    /// case (a gradient case diagnosed only for [`Self::other_initial`] or [`Self::precision`]
    /// has no "no catalogued variant" to say).
    pub catalogued: bool,
}

/// True when the variant can change what `case` expects: its deviation targets the case's
/// encoding (or, for placement, the case is an attention case).
pub fn applies(v: &Variant, case: &Case) -> bool {
    let baseline = |names: &[&str]| matches!(&case.encoding, Encoding::Baseline(b) if names.contains(&b.name.as_str()));
    match v.deviation {
        Deviation::Fire(_) | Deviation::FireLayout(_) => {
            case.encoding.is_fire() && matches!(case.kind, Kind::Bias | Kind::Attention)
        }
        Deviation::T5Bucket(_) => baseline(&["t5-official"]),
        Deviation::AlibiSlopes(_) => baseline(&["alibi-standard"]),
        Deviation::Kerple { .. } => baseline(&["kerple-log", "kerple-power"]),
        Deviation::Placement(_) | Deviation::Unmasked => case.kind == Kind::Attention,
        // Only an encoding that adds a bias can drop it (RoPE rotates, NoPE adds nothing).
        Deviation::BiasDropped => case.kind == Kind::Attention && !baseline(&["rope", "nope"]),
        // Only layers with modules of their own can share the first by mistake.
        Deviation::ModuleReused => {
            case.kind == Kind::Bias
                && matches!(&case.encoding, Encoding::FirePerLayer(p) if p.modules.len() > 1)
        }
    }
}

/// True when diagnosis applies: a valid case that some catalogued variant could explain.
pub fn diagnosable(case: &Case) -> bool {
    case.result == Verdict::Valid && CATALOGUE.iter().any(|v| applies(v, case))
}

/// What the variant predicts for the case, under the implementation's declared placement.
pub fn predict(v: &Variant, case: &Case, caps: &Capabilities) -> Option<BTreeMap<String, Tensor>> {
    evaluate_placed(
        &case.encoding,
        case.kind,
        &case.inputs,
        Some(v),
        caps.placement,
    )
    .ok()
}

/// True when `candidate` reproduces `got` within `profile` on `subset` (everywhere when `None`),
/// after the declared convention for keys after the query is applied to `candidate`.
pub fn agrees(
    case: &Case,
    candidate: &BTreeMap<String, Tensor>,
    got: &BTreeMap<String, Tensor>,
    profile: Profile,
    future: FutureKeys,
    subset: Option<Subset>,
) -> bool {
    distance(case, candidate, got, profile, future, subset) <= 1.0
}

/// How far `got` is from `candidate` on `subset`, in units of `profile`'s tolerance (the
/// largest over the case's outputs; see [`crate::compare::excess_ratio`]). spec: [num.diagnosis]
pub fn distance(
    case: &Case,
    candidate: &BTreeMap<String, Tensor>,
    got: &BTreeMap<String, Tensor>,
    profile: Profile,
    future: FutureKeys,
    subset: Option<Subset>,
) -> f64 {
    let Some(expected) = &case.expected else {
        return f64::INFINITY;
    };
    let per_output = expected.iter().map(|(name, want)| {
        let (Some(c), Some(g)) = (candidate.get(name), got.get(name)) else {
            return f64::INFINITY;
        };
        // Graded against the case's stated scale, each element of the prediction at least its
        // own magnitude ([`excess_ratio`]): a mistake can compute far larger values than the
        // correct output at some elements (a normaliser of ε alone at query 0), and their
        // rounding scales with them there, not at the others. spec: [num.diagnosis]
        let mut c = c.clone();
        c.scale = want.scale;
        let (c, convention) = adjust(case.kind, &case.inputs, &c, future);
        let mask = match subset {
            None => convention,
            Some(s) => {
                let Some(m) = s.mask(case, c.data.len()) else {
                    return f64::INFINITY;
                };
                let m: Vec<bool> = match convention {
                    Some(conv) => m.iter().zip(conv).map(|(a, b)| *a && b).collect(),
                    None => m,
                };
                Some(m)
            }
        };
        // Nothing left to judge (the convention hides the whole subset) is no agreement.
        let g = as_declared(case.kind, &case.inputs, g, future);
        excess_ratio(&g, &c, profile, mask.as_deref())
    });
    per_output.fold(0.0, f64::max)
}

/// How much further than the grading tolerance a variant may be and still be named as the
/// closest explanation: an f32 implementation of a mistake can be ill-conditioned where the
/// correct computation is not (a clamp to c = 10⁻⁴ makes log(1 + c·x) lose digits in f32), so
/// it sits a little outside f32 tolerance of the mistake's f64 prediction. Capped at 10⁻² of
/// the scale, beyond which nothing is an explanation.
fn loose(profile: Profile) -> f64 {
    if profile.rtol == 0.0 {
        1.0
    } else {
        (1e-2 / profile.rtol).clamp(1.0, 100.0)
    }
}

/// How many times closer than any other explanation the closest variant must be to be named.
pub const CLEAR: f64 = 5.0;

/// True when a variant at `distance` from the output stays consistent with it for the run-level
/// verdict (within the loose tolerance).
pub fn consistent(distance: f64, profile: Profile) -> bool {
    distance <= loose(profile)
}

/// A variant that applies to a case, with what it predicts (`None`: the variant cannot evaluate
/// the case, e.g. the mistaken arithmetic fails where the reference does not).
pub type Prediction = (&'static Variant, Option<BTreeMap<String, Tensor>>);

/// The variants that apply to a case with what each predicts (cached by the runner, since the
/// same predictions serve the case's finding and the run's overall verdict).
pub fn predictions(case: &Case, caps: &Capabilities) -> Vec<Prediction> {
    CATALOGUE
        .iter()
        .filter(|v| applies(v, case))
        .map(|v| (v, predict(v, case, caps)))
        .collect()
}

/// Diagnoses one failing case from the variants' predictions. spec: [variants.catalogue]
pub fn diagnose(
    case: &Case,
    got: &BTreeMap<String, Tensor>,
    profile: Profile,
    caps: &Capabilities,
    predicted: &[Prediction],
) -> Finding {
    let mut finding = Finding::default();
    let Some(expected) = &case.expected else {
        return finding;
    };
    // An output missing, or of another shape (the grading says which and how): no mistake of
    // the catalogue is one of names or layout, and "no catalogued variant" would send the user
    // after the maths.
    let laid_out = expected
        .iter()
        .all(|(name, want)| got.get(name).is_some_and(|g| same_layout(g, want)));
    if !laid_out {
        return finding;
    }
    let future = future_keys(case, caps);
    finding.catalogued = !predicted.is_empty() || case.kind == Kind::Bias;
    let predicted: Vec<(&'static Variant, &BTreeMap<String, Tensor>)> = predicted
        .iter()
        .filter_map(|(v, p)| p.as_ref().map(|p| (*v, p)))
        .collect();
    let mut ranked: Vec<(&'static Variant, f64)> = predicted
        .iter()
        .map(|(v, p)| (*v, distance(case, p, got, profile, future, None)))
        .collect();
    ranked.sort_by(|a, b| a.1.total_cmp(&b.1));
    finding.variants = ranked
        .iter()
        .filter(|(_, d)| *d <= 1.0)
        .map(|(v, _)| *v)
        .collect();
    if finding.variants.is_empty() {
        let reference = distance(case, expected, got, profile, future, None);
        if let Some(&(v, d)) = ranked.first() {
            let runner_up = ranked.get(1).map_or(f64::INFINITY, |r| r.1);
            if consistent(d, profile) && runner_up >= CLEAR * d && reference >= CLEAR * d {
                finding.closest = Some((v, d));
            }
        }
    }
    if let Some(note) = gradient_of_l(case, expected, got, profile, future) {
        finding.notes.push(note);
    }
    if let Some(note) = negated_gradients(case, expected, got, profile) {
        finding.notes.push(note);
    }
    finding.other_initial = initial::other_initial(case, got, profile, caps, future);
    if !finding.other_initial.is_empty() {
        // An exact explanation: a variant merely nearest is no longer worth a line.
        finding.closest = None;
    } else if finding.variants.is_empty() && finding.closest.is_none() {
        finding.positions = held_positions(case, got, profile, caps, future);
        if finding.positions.is_none() {
            finding.stored = lower_storage(case, got, profile, caps, future);
        }
        if finding.positions.is_none() && finding.stored.is_none() {
            finding.precision = lower_precision(case, got, profile, caps);
        }
    }
    let explained = !finding.other_initial.is_empty()
        || finding.precision.is_some()
        || finding.stored.is_some()
        || finding.positions.is_some();
    if finding.variants.is_empty() && finding.closest.is_none() && !explained {
        for s in subsets(case) {
            let reference = agrees(case, expected, got, profile, future, Some(s));
            if reference {
                // Off the diagonal says it for the keys after the query too.
                if !(s == Subset::Future && finding.agrees_on.contains(&Subset::OffDiagonal)) {
                    finding.agrees_on.push(s);
                }
                continue;
            }
            finding.partial.extend(
                predicted
                    .iter()
                    .filter(|(_, p)| agrees(case, p, got, profile, future, Some(s)))
                    .map(|(v, _)| (*v, s)),
            );
        }
        // One statement per variant: the first subset it matches on.
        let mut seen: Vec<&str> = Vec::new();
        finding.partial.retain(|(v, _)| {
            let first = !seen.contains(&v.name);
            seen.push(v.name);
            first
        });
    }
    if finding.variants.is_empty() && !explained {
        // The causal triangle, or the whole output where every key is causal (a KV-cache row).
        let causal = expected
            .get("bias")
            .and_then(|b| Subset::Causal.mask(case, b.data.len()))
            .map(|_| Subset::Causal);
        // A case right on its causal triangle failed elsewhere: not a shift of its rows.
        finding.row_shift = if agrees(case, expected, got, profile, future, causal) {
            Some(false)
        } else {
            // The mean per row carries its own rounding: judged at no tighter than f64's
            // tolerance (an `exact` case's ±0 would call every shift inexact).
            let loose = Profile {
                rtol: profile.rtol.max(1e-12),
                ..profile
            };
            row_shifted(case, expected, got)
                .map(|(s, explained)| explained && agrees(case, &s, got, loose, future, causal))
        };
    }
    if finding.row_shift == Some(true) {
        finding.notes.push(format!(
            "on the causal triangle the output is the expected bias plus a constant per query row (and head): the softmax, and so causal attention, is unchanged, but the bias values are not the ones [{}] defines, and conformance grades the bias (Press et al.'s ALiBi code adds r·j, which is −r·(i − j) plus r·i [alibi.bias])",
            case.clauses.first().map_or("attn.logits", String::as_str)
        ));
    }
    // Right on the causal triangle: what differs is the keys after the query (said below), not
    // how ψ or ε is computed.
    let causal_right = agrees(case, expected, got, profile, future, Some(Subset::Causal));
    if finding.variants.is_empty()
        && !explained
        && !causal_right
        && case.flags.contains(&Flag::TinyC)
    {
        finding.notes.push(
            "small-c cases make ε visible and are chosen so that both log1p(|c|·x) and Appendix E's log(1 + |c|·x) stay within f64; a failure no variant explains points at how ψ or ε is computed [num.profiles]".into(),
        );
    }
    // An attention case that is the reference under the other placement: the declaration, not
    // the maths, to fix (a catalogued variant predicts only the placement deviating from
    // after-scaling, not a module declaring before-scaling that computes after).
    if finding.variants.is_empty() && !explained {
        if let Some(p) = other_placement(case, got, profile, caps) {
            finding.notes.push(format!(
                "the output is the reference's with the bias added {}, but the implementation declared `{}`: if that is what it does, declare `{p}` (`placement=\"{p}\"` to the kit's serve) [attn.placement]",
                placement_words(p),
                caps.placement.name()
            ));
        }
    }
    // The declaration concerns FIRE's keys after the query; the baselines define their own.
    if case.encoding.is_fire()
        && !explained
        && case.kind == Kind::Bias
        && case.flags.contains(&Flag::FutureKeys)
        && causal_right
    {
        let fits: Vec<&str> = [FutureKeys::Mirrored, FutureKeys::Zero, FutureKeys::Masked]
            .into_iter()
            .filter(|f| *f != future && agrees(case, expected, got, profile, *f, None))
            .map(FutureKeys::name)
            .collect();
        finding.notes.push(match fits.first() {
            Some(f) => format!(
                "keys after the query follow `{f}`, but the implementation declared `{}`: if that is intended, declare it (`future_keys=\"{f}\"` to the kit's serve, `--future-keys {f}` to the adapters) [conv.future]",
                future.name()
            ),
            // Every difference within bfloat16's rounding: lower-precision arithmetic shows
            // first where the values are largest, which may be the keys after the query.
            None if crate::compare::profile("bf16").is_some_and(|b| {
                profile.rank > b.rank && agrees(case, expected, got, b, future, None)
            }) => format!(
                "only keys after the query differ beyond {} tolerance, and every difference is within bf16's: arithmetic at lower precision (float16 or bfloat16 somewhere) shows first where the values are largest, or a small mistake only at j > i [conv.future], [num.profiles]",
                profile.name
            ),
            None => format!(
                "only keys after the query differ, and no convention reproduces them (`masked` takes −∞ or any value ≤ {MASK_CEILING:e}): a module meant to mirror Appendix E there has a mistake that only shows at j > i; one that computes something else there by design (signed distances) may declare `negated`, which leaves those entries unchecked [conv.future]"
            ),
        });
    }
    finding
}

/// The sentences a report prints for a finding.
pub fn describe(f: &Finding, profile: Profile) -> Vec<String> {
    let mut lines = Vec::new();
    for v in &f.variants {
        lines.push(format!(
            "diagnosis: matches variant `{}` within {} tolerance ({}; violates [{}]); in code: `{}`",
            v.name, profile.name, v.summary, v.violates, v.looks_like
        ));
    }
    if let Some((v, d)) = f.closest {
        lines.push(format!(
            "diagnosis: closest to variant `{}`, {d:.0}× the {} tolerance away (no variant matches within it; the reference and every other variant are ≥ 5× further) ({}; violates [{}]); in code: `{}`",
            v.name, profile.name, v.summary, v.violates, v.looks_like
        ));
    } else if f.catalogued
        && f.variants.is_empty()
        && f.other_initial.is_empty()
        && f.precision.is_none()
        && f.stored.is_none()
        && f.positions.is_none()
        && f.carried.is_none()
    {
        lines.push("diagnosis: no catalogued variant matches the whole output".into());
    }
    if let Some(earlier) = &f.carried {
        lines.push(format!(
            "diagnosis: the output is exactly, value for value, what the implementation returned for the earlier case `{earlier}`, which has another f_θ and expects other values: it carries a result over from one call to the next — a bias cached under a key that leaves out the parameters (the length, the shape) where a new module does not reset it (a module-level dict, a class attribute every instance shares, `functools.lru_cache` on a function of the length) — so in a model every layer, and every step after the first, would get the first bias computed; recompute it, or keep the cache on the instance and key it on everything the bias depends on [fire.bias]"
        ));
    }
    if let Some((o, alike)) = f.other_initial.split_first() {
        let alike = if alike.is_empty() {
            String::new()
        } else {
            let values: Vec<String> = alike.iter().map(|a| a.value.to_string()).collect();
            format!(
                " (so does {} = {}: this case's positions do not tell them apart)",
                o.name,
                values.join(", ")
            )
        };
        let off = match f.failing_off_defaults {
            0 => String::new(),
            n => format!(
                "; but {n} failing case(s) off [fire.defaults], which set every scalar themselves, fail as well: where the module starts is not the whole difference"
            ),
        };
        lines.push(format!(
            "diagnosis: matches the reference with {o}{alike}: the module starts {} elsewhere than the spec's initial value — its constructor's default, or what it makes of the value it is given (the ready-made glues build a module on its own defaults on the cases at [fire.defaults] and load the case's values into its parameters on every other case, so a constructor's default shows on these cases only; `--kwargs` names a value for the constructor){}{off}",
            o.name,
            if f.variants.is_empty() { "" } else { "; the variant(s) above compute the same on this case's positions" }
        ));
    }
    if let Some(p) = f.precision {
        lines.push(format!(
            "diagnosis: agrees with the reference within {p} tolerance, not within {}'s: some of the computation in {} (a distance, ψ or the normaliser cast) though the output is in a wider dtype, or a mistake that small (an extra guard, a small constant) [num.profiles]",
            profile.name,
            if p == "bf16" { "bfloat16 or float16" } else { p }
        ));
    }
    if let Some(held) = f.positions {
        lines.push(format!("diagnosis: matches the reference {held}"));
    }
    if let Some(s) = f.stored {
        lines.push(format!(
            "diagnosis: matches the reference with {s}: the module holds them in {} (Flax's `param_dtype`, a layer made `.half()`, a checkpoint loaded in it) though it computes and returns a wider dtype, so it cannot hold the values it is given, nor in training the small updates an optimiser makes; keep them in the dtype it computes in [num.profiles]",
            s.format
        ));
    }
    for s in &f.agrees_on {
        lines.push(format!(
            "diagnosis: agrees with the reference on {s}; differs on {}",
            s.complement()
        ));
    }
    for (i, (v, s)) in f.partial.iter().enumerate() {
        // Variants matching on the same subset predict the same values there (each within the
        // tolerance of the output): said once, as what this case cannot tell apart, not as one
        // claim per variant — at positions near 10⁶ several mistakes all come to f_θ(0) on the
        // keys after the query, and so does a module whose ψ overflows.
        if f.partial[..i].iter().any(|(_, t)| t == s) {
            continue;
        }
        let alike: Vec<_> = f.partial[i + 1..]
            .iter()
            .filter(|(_, t)| t == s)
            .map(|(w, _)| *w)
            .collect();
        if !alike.is_empty() {
            let names: Vec<String> = std::iter::once(*v)
                .chain(alike.iter().copied())
                .map(|w| format!("`{}`", w.name))
                .collect();
            let said: Vec<String> = std::iter::once(*v)
                .chain(alike)
                .map(|w| format!("{}: {}; violates [{}]", w.name, w.summary, w.violates))
                .collect();
            let Some((last, first)) = names.split_last() else {
                continue;
            };
            lines.push(format!(
                "diagnosis: on {s} the output is what variants {} and {last} predict; at this case's positions they predict the same values there, so this case cannot tell them apart (nor from another mistake computing those values), and each differs from the output elsewhere ({})",
                first.join(", "),
                said.join("; ")
            ));
            continue;
        }
        lines.push(match s {
            Subset::OffDiagonal => format!(
                "diagnosis: matches variant `{}` everywhere except the diagonal (i = j, distance 0), where the output differs from it: a mistake whose literal form is ln 0 or 0/0 at distance 0 is often written with a guard there, an ε or a clamp (e.g. `ln(|c|·x + ε)`) ({}; violates [{}]); in code: `{}`",
                v.name, v.summary, v.violates, v.looks_like
            ),
            _ => format!(
                "diagnosis: matches variant `{}` on {s} only ({}; violates [{}])",
                v.name, v.summary, v.violates
            ),
        });
    }
    lines.extend(f.notes.iter().map(|n| format!("diagnosis: {n}")));
    lines
}
