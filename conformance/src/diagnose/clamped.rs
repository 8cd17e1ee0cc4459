//! Positions clamped to a table's last entry: whether a failing output is the reference's at
//! the case's positions clamped to `P − 1` for a table size `P` modules are written with.
//!
//! A module that indexes a table of positions, or guards against long inputs, with
//! `positions.clamp(max=511)` is right wherever every position is below 512 and wrong past it,
//! where every query and key reads position 511's values: the distance between two positions both
//! past it is 0, a query's normaliser is ψ(max(511, L)). No catalogued mistake computes that (on
//! the keys after the query it coincides with `future-distance-clamped`, which had been the only
//! statement). Evaluating the reference at the clamped positions names it exactly, as
//! [`crate::initial`] does for a constructor's other initial values. spec: [conv.positions]

use std::collections::BTreeMap;

use crate::compare::Profile;
use crate::diagnose::agrees;
use crate::implementation::{Capabilities, FutureKeys};
use crate::implementations::reference::evaluate_placed;
use crate::vectors::format::{Case, Kind, Tensor};

/// Table sizes tried, the paper's training length first: a clamp at `P − 1` of each.
const TABLES: [i64; 8] = [512, 1024, 2048, 256, 4096, 128, 8192, 64];

/// The last position `P − 1` of the first table size `P` (in [`TABLES`]' order) such that the
/// reference at the case's positions clamped to it reproduces `got`; `None` where none does or
/// the case is not a FIRE bias or gradient case. Only clamps that change some position are
/// tried.
pub(super) fn clamped_positions(
    case: &Case,
    got: &BTreeMap<String, Tensor>,
    profile: Profile,
    caps: &Capabilities,
    future: FutureKeys,
) -> Option<i64> {
    if !case.encoding.is_fire() || !matches!(case.kind, Kind::Bias | Kind::Vjp) {
        return None;
    }
    let (queries, keys) = (&case.inputs.queries, &case.inputs.keys);
    let highest = queries.iter().chain(keys).copied().max()?;
    TABLES
        .iter()
        .map(|p| p - 1)
        .filter(|&last| last < highest)
        .find(|&last| {
            let mut inputs = case.inputs.clone();
            let clamp = |list: &[i64]| list.iter().map(|&n| n.min(last)).collect::<Vec<_>>();
            inputs.queries = clamp(queries);
            inputs.keys = clamp(keys);
            evaluate_placed(&case.encoding, case.kind, &inputs, None, caps.placement)
                .is_ok_and(|predicted| agrees(case, &predicted, got, profile, future, None))
        })
}
