//! What explains a failing case besides a catalogued variant: arithmetic at a lower precision,
//! the other placement of the bias, the gradient of L sent for m's, a gradient negated, and a
//! constant per query row (which the softmax does not see). Each is a sentence of the case's finding
//! ([`super::Finding`]). spec: [num.profiles], [attn.placement], [grad.layout], [attn.logits]

use std::collections::BTreeMap;

use crate::compare::Profile;
use crate::implementation::{Capabilities, FutureKeys, Placement};
use crate::vectors::format::{Case, Kind, Tensor};

use super::agrees;

/// The narrowest profile below the case's (f32 then bf16 for an f64 case, bf16 for an f32 one)
/// at which the output would pass (its conventions and acceptable alternatives as the grading
/// has them): what [`Finding::precision`] records. bf16 only where every value the reply holds
/// is a 16-bit float's (an f32 module under bfloat16 or float16 autocast returns those): its tolerance is wide
/// enough to hold small mistakes of the catalogue too, whose statements on subsets it would
/// silence. spec: [num.profiles]
pub(super) fn lower_precision(
    case: &Case,
    got: &BTreeMap<String, Tensor>,
    profile: Profile,
    caps: &Capabilities,
) -> Option<&'static str> {
    let lower: &[&str] = match profile.name {
        "f64" => &["f32", "bf16"],
        "f32" => &["bf16"],
        _ => &[],
    };
    let half_values = got.values().flat_map(|t| &t.data).all(|&v| is_half(v));
    lower
        .iter()
        .filter(|&&name| name != "bf16" || half_values)
        .filter_map(|name| crate::compare::profile(name))
        .find(|p| crate::grade::differing_outputs(case, got, *p, caps).is_empty())
        .map(|p| p.name)
}

/// Whether `v` is a 16-bit float's value: a bfloat16 (a float32 whose low 16 bits are zero) or
/// a float16 (11 significant bits, within its range), or not finite.
fn is_half(v: f64) -> bool {
    let f = v as f32;
    let f16 =
        f.abs() <= 65504.0 && (f == 0.0 || f.abs() >= 2f32.powi(-14)) && f.to_bits() & 0x1fff == 0;
    !v.is_finite() || (f64::from(f) == v && (f.to_bits() & 0xffff == 0 || f16))
}

/// The placement other than the declared one under which an attention case grades clean
/// (against the vectors' outputs for it, `expected_under`), if any: a declaration to fix,
/// said per case and, when every failing case is one, for the run. spec: [attn.placement]
pub(crate) fn other_placement(
    case: &Case,
    got: &BTreeMap<String, Tensor>,
    profile: Profile,
    caps: &Capabilities,
) -> Option<Placement> {
    if case.kind != Kind::Attention {
        return None;
    }
    Placement::ALL
        .iter()
        .copied()
        .filter(|p| *p != caps.placement)
        .find(|p| {
            let under = Capabilities {
                placement: *p,
                ..caps.clone()
            };
            crate::grade::differing_outputs(case, got, profile, &under).is_empty()
        })
}

/// Where a placement puts the bias, in words.
pub fn placement_words(p: Placement) -> &'static str {
    match p {
        Placement::AfterScaling => "after the 1/√d scaling",
        Placement::BeforeScaling => "before the 1/√d scaling",
    }
}

/// On a gradient case, where the reply's gradient for `L_multiplier` is the gradient with
/// respect to the threshold L = |m·L_init| instead of m's (the expected one ÷ L_init·sign m): a
/// glue that differentiates through L, or returns what its module names L. spec: [grad.layout]
pub(super) fn gradient_of_l(
    case: &Case,
    expected: &BTreeMap<String, Tensor>,
    got: &BTreeMap<String, Tensor>,
    profile: Profile,
    future: FutureKeys,
) -> Option<String> {
    let p = case.encoding.fire()?;
    let factor = p.l_init * p.l_multiplier.signum();
    let want = expected.get("L_multiplier")?;
    if case.kind != Kind::Vjp || factor.abs() <= 1.0 || want.data.iter().all(|v| *v == 0.0) {
        return None;
    }
    // A zero gradient is within the tolerance of the expected one ÷ L_init wherever L_init is
    // large (512): it is said as what it is, a multiplier that gets no gradient.
    let zero = got
        .get("L_multiplier")
        .is_some_and(|t| t.data.iter().all(|v| *v == 0.0));
    // The reply with the expected gradient of m in place of its own: how far it is from that
    // is how far its gradient of m alone is off.
    let mut right_m = got.clone();
    right_m.insert("L_multiplier".to_owned(), want.clone());
    if zero && !agrees(case, &right_m, got, profile, future, None) {
        // Every query below L: max(i, L) takes L's branch everywhere, so a backward sending L's
        // gradient through the other branch (only where i > L) sends none.
        let l = (p.l_init * p.l_multiplier).abs();
        let below = case.inputs.queries.iter().all(|&i| (i as f64) < l);
        let branch = if below {
            format!(
                ", or a hand-written backward sends L's gradient through the wrong branch of max(i, L) (every query here is below L = {l}, where ∂max(i, L)/∂L = 1)"
            )
        } else {
            String::new()
        };
        // The other gradients right as well (the expected outputs with the reply's m): m alone
        // is cut. Otherwise the forward differs too, and a query whose max(i, L) takes i's branch
        // where FIRE's takes L's (positions shifted past the threshold) sends m none for that
        // reason (audit 36: a one-based module was told its multiplier was detached).
        let mut with_its_m = expected.clone();
        with_its_m.insert("L_multiplier".to_owned(), got["L_multiplier"].clone());
        if !agrees(case, &with_its_m, got, profile, future, None) {
            return Some(format!(
                "the gradient sent for `L_multiplier` is zero, and other gradients differ too: where the forward differs (positions shifted past the threshold L = {l}, a normaliser taken at another position) a query's max(i, L) can take i's branch where FIRE's takes L's, which sends m nothing; otherwise the multiplier is detached (a stop-gradient, an int cast of L), frozen or unused [grad.vjp]"
            ));
        }
        return Some(format!(
            "the gradient sent for `L_multiplier` is zero: the multiplier is detached (a stop-gradient, an int cast of L), frozen or unused, so the threshold L = |m·L_init| never trains{branch} [grad.vjp]"
        ));
    }
    // The expected outputs with m's gradient replaced by L's: the reply, if that is all it did.
    let mut of_l = expected.clone();
    if let Some(t) = of_l.get_mut("L_multiplier") {
        t.data.iter_mut().for_each(|v| *v /= factor);
    }
    agrees(case, &of_l, got, profile, future, None).then(|| {
        format!(
            "the gradient sent for `L_multiplier` is the one with respect to the threshold L = |m·L_init| (the expected one ÷ L_init·sign m = {factor}): [grad.layout] asks for m's, ∂ℓ/∂m = ∂ℓ/∂L · L_init · sign(m·L_init)"
        )
    })
}

/// On a failing gradient case: the parameters whose gradient is the expected one negated (each
/// within the tolerance, and the expected one not zero), said with the sign a hand-written
/// backward most often loses there — ∂|c|/∂c = sign c where c < 0, ∂|m·L_init|/∂m =
/// L_init·sign(m·L_init) where m·L_init < 0; every one negated is the output's sign, or the
/// cotangent's. spec: [grad.c], [grad.m], [grad.vjp]
pub(super) fn negated_gradients(
    case: &Case,
    expected: &BTreeMap<String, Tensor>,
    got: &BTreeMap<String, Tensor>,
    profile: Profile,
) -> Option<String> {
    let p = case.encoding.fire()?;
    if case.kind != Kind::Vjp {
        return None;
    }
    let nonzero: Vec<(&String, &Tensor)> = expected
        .iter()
        .filter(|(_, want)| want.data.iter().any(|v| *v != 0.0))
        .collect();
    let negated: Vec<&str> = nonzero
        .iter()
        .copied()
        .filter(|(name, want)| {
            got.get(name.as_str()).is_some_and(|g| {
                let minus = Tensor {
                    data: want.data.iter().map(|v| -v).collect(),
                    ..(*want).clone()
                };
                crate::compare::excess_ratio(g, want, profile, None) > 1.0
                    && crate::compare::excess_ratio(g, &minus, profile, None) <= 1.0
            })
        })
        .map(|(name, _)| name.as_str())
        .collect();
    if negated.len() > 1 && negated.len() == nonzero.len() {
        return Some(
            "every gradient sent is the expected one negated: the output, or the cotangent it is given, has the wrong sign (a bias returned as −b, or a backward that negates what it receives) [grad.vjp]"
                .to_owned(),
        );
    }
    let said: Vec<String> = negated
        .iter()
        .map(|&name| match name {
            "c" if p.c < 0.0 => format!(
                "`c`'s (here c = {}: the sign of c, ∂|c|/∂c = sign c, dropped from a backward of ψ = ln(|c|·x + 1))",
                p.c
            ),
            "L_multiplier" if p.l_multiplier * p.l_init < 0.0 => format!(
                "`L_multiplier`'s (here m·L_init = {}: the sign of ∂|m·L_init|/∂m = L_init·sign(m·L_init) dropped)",
                p.l_multiplier * p.l_init
            ),
            other => format!("`{other}`'s"),
        })
        .collect();
    (!said.is_empty()).then(|| {
        format!(
            "the gradient sent is the expected one negated for {}: a sign lost in the forward (a term subtracted where it is added) or in a hand-written backward [grad.vjp]",
            said.join(", ")
        )
    })
}

/// The share of a difference a constant per row must account for before it is said to be one:
/// what is left over the causal keys is at most this fraction of the largest difference.
const ROW_SHIFT_SHARE: f64 = 0.1;

/// `expected` plus, on each (layer's) head's query row, the mean of what `got` adds to it over the row's
/// causal keys: what an implementation differing by a constant per query row computes; and
/// whether that constant accounts for the difference ([`ROW_SHIFT_SHARE`]): a difference that
/// varies along the row, only a little over the tolerance (a threshold of 511 for 512), can fit
/// the tolerance once each row's mean is taken off without being a shift at all. `None` unless
/// the case is a bias case in which some row has two causal keys or more (with one, any
/// difference is "constant").
pub(super) fn row_shifted(
    case: &Case,
    expected: &BTreeMap<String, Tensor>,
    got: &BTreeMap<String, Tensor>,
) -> Option<(BTreeMap<String, Tensor>, bool)> {
    if case.kind != Kind::Bias {
        return None;
    }
    let (want, g) = (expected.get("bias")?, got.get("bias")?);
    let (queries, keys) = (&case.inputs.queries, &case.inputs.keys);
    // `[H, Q, K]`, or `[layers, H, Q, K]` for FIRE-S and per-layer FIRE: rows of K keys.
    let (nq, nk) = (queries.len(), keys.len());
    let rows = want.data.len() / (nk.max(1));
    if want.shape.len() < 3
        || want.shape[want.shape.len() - 2..] != [nq, nk]
        || g.data.len() != want.data.len()
    {
        return None;
    }
    let causal = |r: usize| (0..nk).filter(move |&c| keys[c] <= queries[r]);
    if (0..nq).all(|r| causal(r).count() < 2) {
        return None;
    }
    let mut shifted = want.clone();
    let (mut largest, mut left) = (0.0_f64, 0.0_f64);
    for row in 0..rows {
        let at = row * nk;
        let diffs: Vec<f64> = causal(row % nq)
            .map(|c| g.data[at + c] - want.data[at + c])
            .filter(|d| d.is_finite())
            .collect();
        if diffs.is_empty() {
            continue;
        }
        let mean = diffs.iter().sum::<f64>() / diffs.len() as f64;
        for d in &diffs {
            largest = largest.max(d.abs());
            left = left.max((d - mean).abs());
        }
        shifted.data[at..at + nk]
            .iter_mut()
            .for_each(|x| *x += mean);
    }
    let explained = left <= ROW_SHIFT_SHARE * largest;
    Some((BTreeMap::from([("bias".to_owned(), shifted)]), explained))
}
