//! What a report says beside the run's named variants: the failing cases a name explains only
//! within the looser band it allows, and the declaration (`negated`) that would make the names
//! the implementation's convention rather than its mistake. spec: [proto.report], [conv.future]

use super::Overall;
use crate::implementation::FutureKeys;
use crate::runner::{Question, Status};
use fire_reference::variants::Deviation;

/// The failing cases a run-level name explains only within the looser band it allows (its
/// finding matched none of the names within the grading tolerance): a second, smaller
/// difference shows there (a tanh GeLU beside a clamped distance).
pub fn loosely_explained(r: &crate::runner::Report) -> Vec<String> {
    let Some(Overall::Variants(names)) = &r.overall else {
        return vec![];
    };
    r.outcomes
        .iter()
        .filter(|o| o.question == Question::Values && o.status == Status::Failed)
        .filter(|o| {
            // A finding the catalogue was not consulted for (a gradient case diagnosed for its
            // initial values or precision only) is no case a name explains, loosely or not.
            o.finding.as_ref().is_some_and(|f| {
                f.catalogued && !f.variants.iter().any(|v| names.contains(&v.name))
            })
        })
        .map(|o| o.id.clone())
        .collect()
}

/// The declaration that would make the run's named variants the implementation's convention
/// rather than its mistake: `negated`, where every variant named is FIRE's and differs only at keys
/// after the query (each violates [conv.future] alone: clamped or signed distances there, by
/// design in a causal model that never reads them), every failing case diagnosed matches one
/// of them within the grading tolerance (not only the looser band a run-level name allows: a second,
/// small mistake would still fail after the declaration, its cases unchecked above the
/// diagonal), and the implementation declared something else. The per-case diagnoses say the
/// same of each case; the run-level line repeats it.
pub fn may_declare(r: &crate::runner::Report) -> Option<FutureKeys> {
    let names = match &r.overall {
        Some(Overall::Variants(names)) => names,
        // Nothing catalogued there, only the keys after the query differ: the same declaration.
        Some(Overall::FutureOnly { .. }) => return Some(FutureKeys::Negated),
        _ => return None,
    };
    let each_matched = r
        .outcomes
        .iter()
        .filter(|o| o.question == Question::Values && o.status == Status::Failed)
        .filter_map(|o| o.finding.as_ref())
        .all(|f| f.variants.iter().any(|v| names.contains(&v.name)));
    let declared = r.capabilities.future_keys;
    // FIRE's variants only: the declaration concerns FIRE's encodings, and a baseline keeps
    // the values its own clauses give keys after the query ([conv.future]).
    let future_only = !names.is_empty()
        && names.iter().all(|n| {
            fire_reference::variants::find(n).is_some_and(|v| {
                v.violates == "conv.future" && matches!(v.deviation, Deviation::Fire(_))
            })
        });
    (future_only && each_matched && declared != FutureKeys::Negated).then_some(FutureKeys::Negated)
}
