//! Failures only at keys after the query that no catalogued variant explains
//! ([`super::Overall::FutureOnly`]). spec: [conv.future]

use super::{failed_values, failing_runs, Ran};
use crate::diagnose::{self, Subset};
use crate::implementation::{Capabilities, FutureKeys};
use crate::runner::Outcome;
use crate::vectors::format::Kind;

/// [`super::Overall::FutureOnly`]'s count of failing gradient cases, where every failing case is a
/// FIRE bias case right on its causal triangle or a FIRE gradient case, at least one a bias case,
/// and the implementation declared `mirrored` (Appendix E's keys after the query: under `zero`
/// or `masked` a difference there is from its own declaration, which the cases say). Only
/// when every failed value case gave an output (none errored or broke).
pub(super) fn future_only(
    outcomes: &[Outcome],
    ran: &[Ran],
    failed: &[bool],
    caps: &Capabilities,
) -> Option<usize> {
    let failing = failing_runs(ran, failed);
    if caps.future_keys != FutureKeys::Mirrored || failing.len() != failed_values(outcomes) {
        return None;
    }
    let causal_right = |r: &Ran| {
        r.case.expected.as_ref().is_some_and(|expected| {
            diagnose::agrees(
                r.case,
                expected,
                &r.got,
                r.profile,
                crate::conventions::future_keys(r.case, caps),
                Some(Subset::Causal),
            )
        })
    };
    let mut bias = 0;
    let mut gradients = 0;
    for r in &failing {
        match r.case.kind {
            _ if !r.case.encoding.is_fire() => return None,
            Kind::Bias if causal_right(r) => bias += 1,
            Kind::Vjp => gradients += 1,
            _ => return None,
        }
    }
    (bias > 0).then_some(gradients)
}
