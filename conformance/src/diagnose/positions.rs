//! Positions held otherwise than as they are: whether a failing output is the reference's at the
//! case's positions clamped to a table's last entry, or rounded to a 16-bit float.
//!
//! A module that indexes a table of positions, or guards against long inputs, with
//! `positions.clamp(max=511)` is right wherever every position is below 512 and wrong past it,
//! where every query and key reads position 511's values: the distance between two positions both
//! past it is 0, a query's normaliser is ψ(max(511, L)). No catalogued mistake computes that (on
//! the keys after the query it coincides with `future-distance-clamped`, which had been the only
//! statement). A module whose positions live in a float16 or bfloat16 buffer (a `torch.arange`
//! registered once and cast with the model, `model.to(torch.bfloat16)`) holds the integers
//! exactly only up to 2 048 (float16) or 256 (bfloat16) and rounds the positions past them, so
//! distances between them move by the rounding (float16 holds none past 65 504: ∞ there); a
//! float64 module whose positions pass through float32 does the same past 2^24. Evaluating the
//! reference at the positions so held names either exactly, as [`crate::initial`] does for a
//! constructor's other initial values. spec: [conv.positions]

use std::collections::BTreeMap;
use std::fmt;

use super::stored::{rounded, Format, FORMATS};
use crate::compare::Profile;
use crate::diagnose::agrees;
use crate::implementation::{Capabilities, FutureKeys};
use crate::implementations::reference::evaluate_placed;
use crate::vectors::format::{Case, Kind, Tensor};

/// How the module held the positions, where the reference at positions so held reproduces its
/// output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldPositions {
    /// Clamped to this last position `P − 1` of a table of `P`.
    Clamped(i64),
    /// Rounded to this float (`float16`, `bfloat16`, `float32`).
    Rounded(&'static str),
}

impl fmt::Display for HeldPositions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Clamped(last) => write!(
                f,
                "at the case's positions clamped to {last} (`positions.clamp(max={last})`, a table of {} positions): every position past {last} is read as {last}, so two of them are at distance 0 and a query past it is normalised by ψ(max({last}, L)); FIRE's positions are not bounded [conv.positions]",
                last + 1
            ),
            Self::Rounded(format) => {
                // float32 is a float64 module's cast on the way; a 16-bit one, the model's.
                let (how, keep) = if *format == "float32" {
                    ("or positions cast to it on the way", "buffer, or in the dtype the module computes in")
                } else {
                    ("cast with the model", "or float32 buffer")
                };
                write!(
                    f,
                    "at the case's positions rounded to {format} (a position buffer held in {format}, {how}): {format} holds the integers exactly only up to {}, so the positions past it, and the distances between them, move by its rounding; keep positions in an integer {keep} [conv.positions]",
                    exact_up_to(format)
                )
            }
        }
    }
}

/// Table sizes tried, the paper's training length first: a clamp at `P − 1` of each.
const TABLES: [i64; 8] = [512, 1024, 2048, 256, 4096, 128, 8192, 64];

/// The formats a position buffer may be held in: the 16-bit ones (cast with the model), and
/// float32 (a float64 module whose positions pass through float32, past 2^24), tried before
/// bfloat16: where both reproduce a case (positions near 2^53, which both round alike), the one
/// that moves fewer positions is said.
const ROUNDED: [&str; 3] = ["float16", "float32", "bfloat16"];

/// The largest integer up to which every integer is one of `format`'s values: 2^(mantissa + 1).
fn exact_up_to(format: &str) -> i64 {
    FORMATS
        .iter()
        .find(|f| f.name == format)
        .map_or(0, |f| 1 << (f.mantissa + 1))
}

fn format_named(name: &str) -> Option<&'static Format> {
    FORMATS.iter().find(|f| f.name == name)
}

/// The first way of holding the positions (clamps at `P − 1` in [`TABLES`]' order, then the
/// roundings of [`ROUNDED`]) that changes some position of the case and with which the
/// reference reproduces `got`; `None` where none does or the case is not a FIRE bias or
/// gradient case.
pub(super) fn held_positions(
    case: &Case,
    got: &BTreeMap<String, Tensor>,
    profile: Profile,
    caps: &Capabilities,
    future: FutureKeys,
) -> Option<HeldPositions> {
    if !case.encoding.is_fire() || !matches!(case.kind, Kind::Bias | Kind::Vjp) {
        return None;
    }
    let (queries, keys) = (&case.inputs.queries, &case.inputs.keys);
    let fits = |held: &dyn Fn(i64) -> i64| {
        let moved = queries.iter().chain(keys).any(|&n| held(n) != n);
        let mut inputs = case.inputs.clone();
        inputs.queries = queries.iter().map(|&n| held(n)).collect();
        inputs.keys = keys.iter().map(|&n| held(n)).collect();
        moved
            && evaluate_placed(&case.encoding, case.kind, &inputs, None, caps.placement)
                .is_ok_and(|predicted| agrees(case, &predicted, got, profile, future, None))
    };
    let clamped = TABLES
        .iter()
        .map(|p| p - 1)
        .find(|&last| fits(&|n| n.min(last)))
        .map(HeldPositions::Clamped);
    clamped.or_else(|| {
        ROUNDED
            .iter()
            .find(|name| {
                format_named(name).is_some_and(|format| {
                    // A position past the format's range is ∞ there, and the output no number
                    // this could predict (float16 holds none past 65 504).
                    queries.iter().chain(keys).all(|&n| format.holds(n as f64))
                        // The rounded value of an integer past `exact_up_to` is an integer.
                        && fits(&|n| rounded(n as f64, format) as i64)
                })
            })
            .map(|&name| HeldPositions::Rounded(name))
    })
}
