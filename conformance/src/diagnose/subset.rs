//! The named parts of a bias output (the causal triangle, the keys after the query, the
//! diagonal, the queries either side of L) on which a failing case's agreement with the
//! reference and with each catalogued variant is judged separately, so that a partial match is
//! said as one. spec: [num.diagnosis]

use std::fmt;

use crate::vectors::format::{Case, Encoding, Kind};
use crate::vectors::params;

/// A named part of a bias output on which agreement is judged separately.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Subset {
    /// Keys at or before their query: what a causal model uses.
    Causal,
    /// Keys after their query.
    Future,
    /// Every pair but the diagonal: `i ≠ j`. A mistake whose literal form is `ln 0` or `0/0` at
    /// distance 0 is written in practice with a guard there (`ln(|c|·x + ε)`), which matches it
    /// everywhere else; the causal triangle holds the diagonal, so only this subset shows it.
    OffDiagonal,
    /// The diagonal `i = j` (distance 0): the complement of [`Subset::OffDiagonal`].
    Diagonal,
    /// Queries below the threshold: `i < L`.
    BelowThreshold(f64),
    /// Queries at or above the threshold: `i ≥ L`.
    AtOrAboveThreshold(f64),
}

impl fmt::Display for Subset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Subset::Causal => write!(f, "the causal triangle (keys ≤ query)"),
            Subset::Future => write!(f, "the keys after the query"),
            Subset::OffDiagonal => write!(f, "every pair but the diagonal (i ≠ j)"),
            Subset::Diagonal => write!(f, "the diagonal (i = j, distance 0)"),
            Subset::BelowThreshold(l) => write!(f, "the queries below L = {l}"),
            Subset::AtOrAboveThreshold(l) => write!(f, "the queries at or above L = {l}"),
        }
    }
}

impl Subset {
    /// The subset's complement, for "differs on …".
    pub fn complement(self) -> Self {
        match self {
            Subset::Causal => Subset::Future,
            Subset::Future => Subset::Causal,
            Subset::OffDiagonal => Subset::Diagonal,
            Subset::Diagonal => Subset::OffDiagonal,
            Subset::BelowThreshold(l) => Subset::AtOrAboveThreshold(l),
            Subset::AtOrAboveThreshold(l) => Subset::BelowThreshold(l),
        }
    }

    /// Which elements of a `[…, Q, K]` bias of `case` the subset holds, or `None` when it holds
    /// none or all of them (no partial statement to make).
    pub(super) fn mask(self, case: &Case, len: usize) -> Option<Vec<bool>> {
        let (q, k) = (&case.inputs.queries, &case.inputs.keys);
        let (nq, nk) = (q.len(), k.len());
        if case.kind != Kind::Bias || nq * nk == 0 || !len.is_multiple_of(nq * nk) {
            return None;
        }
        let m: Vec<bool> = (0..len)
            .map(|n| {
                let (i, j) = (q[(n / nk) % nq], k[n % nk]);
                match self {
                    Subset::Causal => j <= i,
                    Subset::Future => j > i,
                    Subset::OffDiagonal => j != i,
                    Subset::Diagonal => j == i,
                    Subset::BelowThreshold(l) => (i as f64) < l,
                    Subset::AtOrAboveThreshold(l) => (i as f64) >= l,
                }
            })
            .collect();
        (m.iter().any(|&b| b) && !m.iter().all(|&b| b)).then_some(m)
    }
}

/// The threshold L of a case's FIRE module, when it has one (one module, or FIRE-S).
fn threshold(case: &Case) -> Option<f64> {
    let p = match &case.encoding {
        Encoding::Fire(p) => p,
        Encoding::FireShared(s) => &s.module,
        _ => return None,
    };
    params::to_fire(p).ok()?.threshold_value()
}

/// The subsets a partial statement is made on, largest first: a variant is named on the first
/// it matches, so `log-without-plus-one` guarded at distance 0 reads "every pair but the
/// diagonal", not "the keys after the query". spec: [num.diagnosis]
pub(super) fn subsets(case: &Case) -> Vec<Subset> {
    let mut out = vec![Subset::OffDiagonal, Subset::Causal, Subset::Future];
    if let Some(l) = threshold(case) {
        out.extend([Subset::BelowThreshold(l), Subset::AtOrAboveThreshold(l)]);
    }
    out
}
