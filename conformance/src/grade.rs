//! Grading one reply against its case: the outputs graded (the normative ones or those under a
//! declared convention), their acceptable alternatives, the comparison rule, and what a reply
//! must not carry. spec: [proto.reply], [vec.case], [vec.invalid], [num.compare]

use std::borrow::Cow;
use std::collections::BTreeMap;

use crate::compare::{compare_either, Mismatch, Profile, Shown};
use crate::conventions::{adjust, as_declared, future_keys, CAUSAL_COTANGENT};
use crate::implementation::{Capabilities, FutureKeys, Placement, Reply};
use crate::runner::Status;
use crate::vectors::format::{Case, Kind, Tensor, Verdict};

/// How a case the implementation skipped for its dtype begins its detail line: the run's
/// summary names it even where other reasons skip more cases (a module hard-coding float32
/// positions at `--dtype bf16`). spec: [proto.reply]
pub const CANNOT_COMPUTE: &str =
    "skipped by the implementation, which cannot compute in this dtype";

/// Grades one reply. spec: [proto.reply], [vec.invalid], [num.compare]
pub fn judge(
    case: &Case,
    reply: &Reply,
    profile: Profile,
    caps: &Capabilities,
) -> (Status, Vec<String>) {
    match (reply, case.result) {
        (Reply::Broken(m), _) => (Status::Failed, vec![m.clone()]),
        (Reply::Skipped(r), _) => (Status::Skipped, vec![format!("skipped by the implementation: {r}")]),
        (Reply::UnsupportedDtype(r), _) => (
            Status::Skipped,
            vec![format!("{CANNOT_COMPUTE}: {r}")],
        ),
        (Reply::Errored(_), Verdict::Invalid) => (Status::Passed, vec![]),
        (Reply::Errored(m), Verdict::Valid) => (Status::Failed, vec![format!("errored on a valid case: {m}")]),
        (Reply::Mistake(m), Verdict::Valid) => (
            Status::Failed,
            vec![format!("the glue found the module wrong: {m}")],
        ),
        (Reply::Mistake(m), Verdict::Invalid) => (
            Status::Failed,
            vec![format!(
                "the module did not reject the invalid case, and the glue found it wrong: {m} [num.errors]"
            )],
        ),
        (Reply::Output(_), Verdict::Invalid) => (
            Status::Failed,
            vec!["returned an output for an invalid case; it must be rejected (reply `errored`) [num.errors]".into()],
        ),
        (Reply::Output(got), Verdict::Valid) => {
            let graded = compare_outputs(case, got, profile, caps);
            let status = if graded.failures.is_empty() { Status::Passed } else { Status::Failed };
            (status, graded.failures.into_iter().chain(graded.notes).collect())
        }
    }
}

/// The convention whose outputs grade `case` for an implementation with `caps`
/// (`expected_under`'s key), or `None` for the normative outputs: the placement of attention
/// cases, and for gradient cases the cotangent restricted to the causal triangle when keys
/// after the query are not mirrored. spec: [vec.case], [attn.placement], [conv.future]
fn convention(case: &Case, caps: &Capabilities) -> Option<&'static str> {
    let name = match (case.kind, caps.placement, future_keys(case, caps)) {
        (Kind::Attention, Placement::BeforeScaling, _) => "placement=before-scaling",
        (Kind::Vjp, _, f) if f != FutureKeys::Mirrored => CAUSAL_COTANGENT,
        _ => return None,
    };
    case.expected_under
        .as_ref()?
        .contains_key(name)
        .then_some(name)
}

/// The outputs `case` is graded against for an implementation with `caps`: the normative
/// ones, or those under its declared convention where the case has them. spec: [vec.case]
pub fn expected_for<'a>(
    case: &'a Case,
    caps: &Capabilities,
) -> Option<&'a BTreeMap<String, Tensor>> {
    match convention(case, caps) {
        Some(name) => case.expected_under.as_ref()?.get(name),
        None => case.expected.as_ref(),
    }
}

/// The acceptable alternatives beside [`expected_for`]'s outputs. spec: [vec.case]
pub fn acceptable_for<'a>(case: &'a Case, caps: &Capabilities) -> &'a [BTreeMap<String, Tensor>] {
    let alternatives = match convention(case, caps) {
        Some(name) => case.acceptable_under.as_ref().and_then(|u| u.get(name)),
        None => case.acceptable.as_ref(),
    };
    alternatives.map_or(&[], Vec::as_slice)
}

/// The outputs of a valid reply that fail their comparison, by name (`init_L` where the reply
/// trains it, [grad.layout]): for a gradient case, the parameters whose gradients are wrong.
pub fn differing_outputs(
    case: &Case,
    got: &BTreeMap<String, Tensor>,
    profile: Profile,
    caps: &Capabilities,
) -> Vec<String> {
    compare_outputs(case, got, profile, caps).differing
}

/// What [`compare_outputs`] found.
#[derive(Default)]
struct Graded {
    /// Why the reply fails, line by line (empty: it passes).
    failures: Vec<String>,
    /// What a passing comparison accepted.
    notes: Vec<String>,
    /// The outputs that fail, by name.
    differing: Vec<String>,
}

fn compare_outputs(
    case: &Case,
    got: &BTreeMap<String, Tensor>,
    profile: Profile,
    caps: &Capabilities,
) -> Graded {
    let mut graded = Graded::default();
    let Graded {
        failures: details,
        notes,
        differing,
    } = &mut graded;
    let Some(expected) = expected_for(case, caps) else {
        return graded;
    };
    for (name, want) in expected {
        let (want, mask) = adjust(case.kind, &case.inputs, want, future_keys(case, caps));
        let acceptable: Vec<Tensor> = acceptable_for(case, caps)
            .iter()
            .filter_map(|a| a.get(name))
            .map(|a| adjust(case.kind, &case.inputs, a, future_keys(case, caps)).0)
            .collect();
        let result = match got.get(name) {
            None => Err(Mismatch::Missing),
            Some(g) => {
                let g = as_declared(case.kind, &case.inputs, g, future_keys(case, caps));
                let g = scalar_as_scalar(g, &want);
                compare_either(&g, &want, &acceptable, profile, mask.as_deref())
            }
        };
        if result.is_err() {
            differing.push(name.clone());
        }
        match result {
            Ok(0) => {}
            Ok(n) => notes.push(format!(
                "accepted: {n} element(s) of `{name}` match one of the case's acceptable alternatives, where the spec leaves the value to the implementation (its floating-point library, or its sub-gradient at a kink)"
            )),
            Err(Mismatch::Missing) => {
                // A misnamed output (`biases`, `grad_C`) is named beside the missing one.
                let unasked: Vec<String> = got
                    .keys()
                    .filter(|k| !expected.contains_key(*k))
                    .map(|k| format!("`{k}`"))
                    .collect();
                details.push(if unasked.is_empty() {
                    format!("output `{name}` is missing from the reply")
                } else {
                    format!(
                        "output `{name}` is missing from the reply, which has {} instead (outputs the case did not ask for)",
                        unasked.join(", ")
                    )
                })
            }
            Err(Mismatch::Shape { want, got }) => details.push(format!(
                "output `{name}` has shape {got:?}, expected {want:?}{}",
                layout_hint(&got, &want)
            )),
            Err(Mismatch::Values {
                count,
                checked,
                worst,
                first,
            }) => {
                details.push(format!(
                    "output `{name}` {:?}: {count} of {checked} elements differ (profile {}: |got − want| ≤ {:e} + {:e} · scale {})",
                    want.shape,
                    profile.name,
                    profile.atol,
                    profile.rtol,
                    want.scale.map_or_else(|| "max|want|".into(), |s| format!("{s:.4e}"))
                ));
                details.push(format!("  worst {}", Shown(&worst, &want.shape)));
                for e in first.iter().filter(|e| e.flat != worst.flat) {
                    details.push(format!("  at    {}", Shown(e, &want.shape)));
                }
            }
        }
    }
    for (name, why) in trained_frozen(case, expected, got) {
        details.push(why);
        differing.push(name.into());
    }
    graded
}

/// What a shape that holds the right number of values most likely is: the last two axes
/// swapped (a bias as `[H, K, Q]`, a weight as `[in, out]`), or axes of 1 added or dropped.
fn layout_hint(got: &[usize], want: &[usize]) -> &'static str {
    let squeezed = |s: &[usize]| s.iter().copied().filter(|&d| d != 1).collect::<Vec<_>>();
    let n = want.len();
    if got.len() == n
        && n >= 2
        && got[..n - 2] == want[..n - 2]
        && got[n - 2] == want[n - 1]
        && got[n - 1] == want[n - 2]
    {
        " (the last two axes swapped: transpose them)"
    } else if squeezed(got) == squeezed(want) && got.len() > n {
        " (an extra axis of 1: drop it)"
    } else if squeezed(got) == squeezed(want) && got.len() < n {
        " (an axis of 1 missing)"
    } else {
        ""
    }
}

/// Whether `got` is a scalar sent as a one-element tensor, `[1]` or `[1, 1, 1]` (a parameter
/// kept so, a common style, whose gradient has its shape), where `want` is the scalar `[]`.
/// spec: [proto.reply], [grad.layout]
fn one_element_scalar(got: &Tensor, want: &Tensor) -> bool {
    want.shape.is_empty() && !got.shape.is_empty() && got.shape.iter().all(|&d| d == 1)
}

/// Whether `got` is laid out as `want`: the same shape, or a scalar as a one-element tensor.
pub(crate) fn same_layout(got: &Tensor, want: &Tensor) -> bool {
    got.shape == want.shape || one_element_scalar(got, want)
}

/// A scalar output sent as a one-element tensor ([`one_element_scalar`]) read as the scalar
/// `[]` the case holds: the same one value. spec: [proto.reply], [grad.layout]
fn scalar_as_scalar<'a>(got: Cow<'a, Tensor>, want: &Tensor) -> Cow<'a, Tensor> {
    if one_element_scalar(&got, want) {
        let mut t = got.into_owned();
        t.shape.clear();
        Cow::Owned(t)
    } else {
        got
    }
}

/// The frozen parameters a gradient reply trains, with why each fails: a nonzero gradient for
/// `init_L`, which [grad.layout] freezes, or for `L_multiplier` where the case does not ask for
/// one (a fixed or disabled threshold, whose `m` has gradient 0). The module's other gradients
/// can all be right (`L = |m·L_init|` splits the same sensitivity between `m` and `L_init`), so
/// only these outputs show it; glue that returns every parameter's gradient sends them.
/// spec: [grad.layout]
fn trained_frozen(
    case: &Case,
    expected: &BTreeMap<String, Tensor>,
    got: &BTreeMap<String, Tensor>,
) -> Vec<(&'static str, String)> {
    if case.kind != Kind::Vjp {
        return vec![];
    }
    let largest = |name: &str| {
        got.get(name)
            .filter(|_| !expected.contains_key(name))
            .map(|t| t.data.iter().fold(0.0_f64, |a, v| a.max(v.abs())))
            .filter(|&l| l != 0.0)
    };
    let mut out = Vec::new();
    if let Some(l) = largest("init_L") {
        out.push(("init_L", format!(
            "the reply carries a gradient for `init_L` (|·| up to {l:e}), which [grad.layout] freezes: the module trains init_L (make it a buffer, or a parameter with requires_grad=False)"
        )));
    }
    if let Some(l) = largest("L_multiplier") {
        out.push(("L_multiplier", format!(
            "the reply carries a gradient for `L_multiplier` (|·| up to {l:e}), which is 0 with the case's fixed or disabled threshold ([grad.layout]): the module trains the multiplier of a threshold the case fixes"
        )));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::layout_hint;

    /// A shape holding the right values in another layout is said to be the likely one.
    #[test]
    fn a_layout_mistake_is_named_by_the_shapes() {
        assert_eq!(
            layout_hint(&[4, 5, 3], &[4, 3, 5]),
            " (the last two axes swapped: transpose them)"
        );
        assert_eq!(
            layout_hint(&[32, 1], &[1, 32]),
            " (the last two axes swapped: transpose them)"
        );
        assert_eq!(
            layout_hint(&[1, 4, 3, 5], &[4, 3, 5]),
            " (an extra axis of 1: drop it)"
        );
        assert_eq!(
            layout_hint(&[4, 3, 5], &[1, 4, 3, 5]),
            " (an axis of 1 missing)"
        );
        assert_eq!(layout_hint(&[4, 3, 6], &[4, 3, 5]), "");
    }
}
