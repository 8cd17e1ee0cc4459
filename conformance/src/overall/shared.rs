//! What explains the failing cases without a catalogued variant: the positions held otherwise
//! ([`diagnose::HeldPositions`]), the parameters held at a lower precision
//! ([`diagnose::Stored`]), another initial value ([`crate::initial`]) — each found per case by
//! the diagnosis, named for the run where every failing case has the same — and an earlier
//! case's output repeated ([`diagnose::Finding::carried`]), named where any failing case has it.
//! spec: [proto.report], [conv.positions], [num.profiles], [fire.defaults]

use super::{failing_findings, Ran};
use crate::diagnose;
use crate::runner::Outcome;

/// What `pick` reads off each failing case's finding, where every failing case has it; `None`
/// where one has not, or none failed ([`failing_findings`]).
fn each_failing<T>(
    outcomes: &[Outcome],
    ran: &[Ran],
    failed: &[bool],
    pick: impl Fn(&diagnose::Finding) -> Option<T>,
) -> Option<Vec<T>> {
    let each: Vec<T> = failing_findings(outcomes, ran, failed)?
        .into_iter()
        .map(pick)
        .collect::<Option<_>>()?;
    Some(each)
}

/// How the positions were held, where that explains every failing case the same way.
/// spec: [conv.positions]
pub(super) fn held_positions(
    outcomes: &[Outcome],
    ran: &[Ran],
    failed: &[bool],
) -> Option<diagnose::HeldPositions> {
    let each = each_failing(outcomes, ran, failed, |f| f.positions)?;
    let first = *each.first()?;
    each.iter().all(|&h| h == first).then_some(first)
}

/// Where failing cases repeat an earlier case's output ([`diagnose::Finding::carried`]): how
/// many, and the first with the case it repeats. Named for the run even where other failing
/// cases do not (they errored on a tensor of another case's shape, say): a module carrying a
/// result from one call to the next has that defect whatever else it computes.
/// spec: [fire.bias]
pub(super) fn carried(
    outcomes: &[Outcome],
    ran: &[Ran],
    failed: &[bool],
) -> Option<super::Overall> {
    let mut each = ran
        .iter()
        .zip(failed)
        .filter(|(_, &f)| f)
        .filter_map(|(r, _)| {
            let o = &outcomes[r.outcome];
            Some((o.id.clone(), o.finding.as_ref()?.carried.clone()?))
        });
    let (case, from) = each.next()?;
    Some(super::Overall::Carried {
        count: 1 + each.count(),
        failed: super::failed_values(outcomes),
        case,
        from,
    })
}

/// The lower-precision storage of the parameters that explains every failing case, when each
/// failing case has one and all name the same format (of the parameters they name, the most:
/// a case whose scalars the spec's values already hold names f_θ's alone). spec: [num.profiles]
pub(super) fn stored(
    outcomes: &[Outcome],
    ran: &[Ran],
    failed: &[bool],
) -> Option<(diagnose::Stored, usize)> {
    let findings = failing_findings(outcomes, ran, failed)?;
    let each: Vec<diagnose::Stored> = findings.iter().filter_map(|f| f.stored).collect();
    let first = *each.first()?;
    // A case the storage does not reproduce value for value but that agrees within its
    // precision (the one profile coarser than f32 stands for both 16-bit formats) has the same
    // cause: Flax's `param_dtype=bfloat16` told so on 32 cases of 33 and "within bf16
    // tolerance" on the last had been left undiagnosed at run level.
    let level = if first.format == "float32" {
        "f32"
    } else {
        "bf16"
    };
    let within = findings
        .iter()
        .filter(|f| f.stored.is_none() && f.precision == Some(level))
        .count();
    // Most of them named by it, not a storage one case fits by chance beside a precision.
    let named = each.len() > within && each.len() + within == findings.len();
    (named && each.iter().all(|s| s.format == first.format)).then(|| {
        (
            diagnose::Stored {
                format: first.format,
                which: diagnose::Which::union(each.iter().map(|s| s.which)),
            },
            within,
        )
    })
}

/// The other initial values that explain every failing case, the distinct ones in the order
/// first met, when each failing case has one ([`crate::initial`]). Of the values a case cannot
/// tell apart, the one every case of the same scalar shares is named (a threshold of 511 on a
/// case whose queries are all past it and 256 as well).
pub(super) fn other_initial(
    outcomes: &[Outcome],
    ran: &[Ran],
    failed: &[bool],
) -> Option<Vec<crate::initial::OtherInitial>> {
    let sets: Vec<&[crate::initial::OtherInitial]> = failing_findings(outcomes, ran, failed)?
        .iter()
        .map(|f| (!f.other_initial.is_empty()).then_some(&f.other_initial[..]))
        .collect::<Option<_>>()?;
    Some(shared_values(&sets))
}

/// The values to name of each case's fitting ones (`sets`, none empty): per case the first that
/// every case of the same scalar shares, else its first, the distinct ones in the order first
/// met; a threshold the bias cases show said by the factor a gradient case names.
pub(super) fn shared_values(
    sets: &[&[crate::initial::OtherInitial]],
) -> Vec<crate::initial::OtherInitial> {
    let shared = |o: &crate::initial::OtherInitial| {
        sets.iter()
            .filter(|s| s.first().is_some_and(|f| f.name == o.name))
            .all(|s| s.contains(o))
    };
    let mut values: Vec<crate::initial::OtherInitial> = Vec::new();
    for set in sets {
        let o = *set.iter().find(|o| shared(o)).unwrap_or(&set[0]);
        if !values.contains(&o) {
            values.push(o);
        }
    }
    // A threshold the bias cases show is said by the factor a gradient case names.
    let named = |l: f64| {
        values
            .iter()
            .any(|o| o.name != crate::initial::THRESHOLD && o.threshold() == Some(l))
    };
    let kept = values
        .iter()
        .filter(|o| o.name != crate::initial::THRESHOLD || !o.threshold().is_some_and(named))
        .copied()
        .collect();
    kept
}
