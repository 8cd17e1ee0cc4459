//! Diagnosis: when a FIRE case fails, which catalogued deviation does the output match?
//!
//! Every entry of `fire_reference::fire::variants::CATALOGUE` is evaluated on the failing case's
//! own parameters and positions and compared with the implementation's output under the case's
//! tolerance; a new catalogue entry is diagnosed without any change here.
//! spec: [variants.catalogue]

use std::collections::BTreeMap;

use fire_reference::attention::Placement as RefPlacement;
use fire_reference::fire::variants::{Variant, CATALOGUE};

use crate::compare::{compare, Profile};
use crate::conventions::{adjust, causal_only};
use crate::implementation::{Capabilities, FutureKeys, Placement};
use crate::implementations::reference::evaluate_placed;
use crate::vectors::format::{Case, Encoding, Kind, Tensor, Verdict};

/// What diagnosis found for one case.
#[derive(Debug, Clone, Default)]
pub struct Finding {
    /// Every catalogued variant whose output matches the implementation's.
    pub variants: Vec<&'static Variant>,
    /// Convention hints (placement, keys after the query).
    pub notes: Vec<String>,
}

/// True when diagnosis applies: a valid FIRE bias or attention case.
pub fn diagnosable(case: &Case) -> bool {
    case.result == Verdict::Valid
        && matches!(case.kind, Kind::Bias | Kind::Attention)
        && matches!(
            case.encoding,
            Encoding::Fire(_) | Encoding::FireShared(_) | Encoding::FirePerLayer(_)
        )
}

fn placement(caps: &Capabilities) -> RefPlacement {
    match caps.placement {
        Placement::AfterScaling => RefPlacement::AfterScaling,
        Placement::BeforeScaling => RefPlacement::BeforeScaling,
    }
}

fn matches_all(
    case: &Case,
    candidate: &BTreeMap<String, Tensor>,
    got: &BTreeMap<String, Tensor>,
    profile: Profile,
    future: FutureKeys,
    causal: bool,
) -> bool {
    let Some(expected) = &case.expected else {
        return false;
    };
    expected.iter().all(|(name, want)| {
        let (Some(c), Some(g)) = (candidate.get(name), got.get(name)) else {
            return false;
        };
        let mut c = c.clone();
        c.scale = want.scale;
        let (c, mask) = adjust(case.kind, &case.inputs, &c, future);
        let mask = if causal {
            causal_only(case.kind, &case.inputs, &c)
        } else {
            mask
        };
        compare(g, &c, profile, mask.as_deref()).is_ok()
    })
}

/// True when `variant`, evaluated on the case, reproduces `got` within `profile`.
pub fn explains(
    variant: &Variant,
    case: &Case,
    got: &BTreeMap<String, Tensor>,
    profile: Profile,
    caps: &Capabilities,
) -> bool {
    match evaluate_placed(
        &case.encoding,
        case.kind,
        &case.inputs,
        Some(variant),
        placement(caps),
    ) {
        Ok(out) => matches_all(case, &out, got, profile, caps.future_keys, false),
        Err(_) => false,
    }
}

/// Diagnoses one failing case. spec: [variants.catalogue]
pub fn diagnose(
    case: &Case,
    got: &BTreeMap<String, Tensor>,
    profile: Profile,
    caps: &Capabilities,
) -> Finding {
    let mut finding = Finding::default();
    if !diagnosable(case) {
        return finding;
    }
    finding.variants = CATALOGUE
        .iter()
        .filter(|v| explains(v, case, got, profile, caps))
        .collect();
    if finding.variants.is_empty() && case.flags.contains(&crate::vectors::flags::Flag::TinyC) {
        finding.notes.push(
            "small-c cases make ε visible and are chosen so that both log1p(|c|·x) and Appendix E's log(1 + |c|·x) stay within f64; a failure no variant explains points at how ψ or ε is computed [num.profiles]".into(),
        );
    }
    if let Some(expected) = &case.expected {
        if case.kind == Kind::Bias
            && case
                .flags
                .contains(&crate::vectors::flags::Flag::FutureKeys)
        {
            let reference = expected.clone();
            if matches_all(case, &reference, got, profile, caps.future_keys, true) {
                let fits: Vec<&str> = [FutureKeys::Mirrored, FutureKeys::Zero, FutureKeys::Masked]
                    .into_iter()
                    .filter(|f| matches_all(case, &reference, got, profile, *f, false))
                    .map(FutureKeys::name)
                    .collect();
                finding.notes.push(match fits.first() {
                    Some(f) => format!(
                        "the causal lower triangle matches; keys after the query follow `{f}`, but the implementation declared `{}` [conv.future]",
                        caps.future_keys.name()
                    ),
                    None => "the causal lower triangle matches; only keys after the query differ, under no known convention [conv.future]".into(),
                });
            }
        }
        if case.kind == Kind::Attention {
            let other = match caps.placement {
                Placement::AfterScaling => "placement=before-scaling",
                Placement::BeforeScaling => "",
            };
            if let Some(alt) = case.expected_under.as_ref().and_then(|u| u.get(other)) {
                if matches_all(case, alt, got, profile, caps.future_keys, false) {
                    finding.notes.push("the output matches the bias added before the 1/√d scaling; declare `placement: before-scaling` if that is intended [attn.placement]".into());
                }
            }
        }
    }
    finding
}

/// The sentence a report prints for a finding.
pub fn describe(f: &Finding, profile: Profile) -> Vec<String> {
    let mut lines = Vec::new();
    match f.variants.as_slice() {
        [] => lines.push("diagnosis: no known variant matches".into()),
        vs => {
            for v in vs {
                lines.push(format!(
                    "diagnosis: matches variant `{}` within {} tolerance ({}; violates [{}])",
                    v.name, profile.name, v.summary, v.violates
                ));
            }
        }
    }
    lines.extend(f.notes.iter().map(|n| format!("diagnosis: {n}")));
    lines
}
