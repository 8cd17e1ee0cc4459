//! One catalogued variant and another initial value between them
//! ([`super::Overall::VariantAndInitial`]): a module with a mistake whose constructor also
//! starts a scalar elsewhere than [fire.defaults] (a public FIRE normalising by the distance,
//! `init_L = 256.0` in its signature) fails the cases off the defaults as the variant, and the
//! cases at the defaults as neither the variant nor the other starting value alone: the variant
//! evaluated at that value reproduces them. The reconstruction is the harness's, not the
//! paper's. spec: [variants.catalogue], [fire.defaults]

use fire_reference::variants::CATALOGUE;

use super::{failing_runs, shared::shared_values, Ran};
use crate::implementation::Capabilities;
use crate::initial::{at_defaults, other_initial_under, OtherInitial};
use crate::runner::Outcome;

/// The first catalogued variant (in the catalogue's order) that every failing diagnosable case
/// off the defaults matches whole, that agrees with every passing case (`passing_agree`), and
/// that reproduces every failing diagnosable case at the defaults, there with one other initial
/// value where not at the spec's, some case needing one; with the values to name
/// ([`shared_values`]). Failing cases no variant applies to (gradient cases) constrain it no
/// more than they do [`super::Overall::Variants`]. None without a failing diagnosable case on
/// each side.
pub(super) fn variant_and_initial(
    outcomes: &[Outcome],
    ran: &[Ran],
    failed: &[bool],
    caps: &Capabilities,
    passing_agree: impl Fn(&str) -> bool,
) -> Option<(&'static str, Vec<OtherInitial>)> {
    let (at, off): (Vec<&Ran>, Vec<&Ran>) = failing_runs(ran, failed)
        .iter()
        .filter(|r| r.diagnosable)
        .partition(|r| at_defaults(r.case));
    if at.is_empty() || off.is_empty() {
        return None;
    }
    let matches = |r: &Ran, name: &str| {
        outcomes[r.outcome]
            .finding
            .as_ref()
            .is_some_and(|f| f.variants.iter().any(|v| v.name == name))
    };
    CATALOGUE
        .iter()
        .filter(|v| off.iter().all(|r| matches(r, v.name)) && passing_agree(v.name))
        .find_map(|v| {
            let mut sets: Vec<Vec<OtherInitial>> = Vec::new();
            for r in &at {
                if matches(r, v.name) {
                    continue;
                }
                let future = crate::conventions::future_keys(r.case, caps);
                let fitting = other_initial_under(r.case, &r.got, r.profile, caps, future, Some(v));
                if fitting.is_empty() {
                    return None;
                }
                sets.push(fitting);
            }
            let sets: Vec<&[OtherInitial]> = sets.iter().map(Vec::as_slice).collect();
            (!sets.is_empty()).then(|| (v.name, shared_values(&sets)))
        })
}
