//! A failing case whose output is, value for value, what the implementation returned for an
//! earlier case that expects something else: a result carried from one case to the next. FIRE's
//! bias is a function of the parameters and positions of the call [fire.bias]; an output that
//! follows an earlier call's in place of the case's own comes from a cache keyed on less than
//! that (the length, the shape) and kept where a newly built module does not reset it — a
//! module-level dict, a class attribute shared by every instance, `functools.lru_cache` on a
//! function of the length. The catalogue's variants are functions of the case alone and cannot
//! name it; "no catalogued variant" would send the user after the maths.
//! spec: [proto.report], [fire.bias]

use std::collections::BTreeMap;

use super::Ran;
use crate::compare::excess_ratio;
use crate::grade::expected_for;
use crate::implementation::Capabilities;
use crate::vectors::format::{Encoding, MlpParams, Tensor};

/// Whether an output holds two different finite values somewhere: one of a single value, or
/// none finite (zeros or NaN everywhere), repeats itself without anything carried.
fn varied(a: &BTreeMap<String, Tensor>) -> bool {
    a.values().any(|t| {
        let mut finite = t.data.iter().filter(|v| v.is_finite());
        finite
            .next()
            .is_some_and(|first| finite.any(|v| v != first))
    })
}

/// Whether two outputs hold the same values bit for bit (NaN as NaN) under the same names and
/// shapes, and vary ([`varied`]). Exact: a cached tensor handed back again is identical, while
/// two computations of different parameters agree on every value only where they compute the
/// same thing.
fn identical(a: &BTreeMap<String, Tensor>, b: &BTreeMap<String, Tensor>) -> bool {
    varied(a)
        && a.len() == b.len()
        && a.iter().zip(b).all(|((na, ta), (nb, tb))| {
            na == nb
                && ta.shape == tb.shape
                && ta.data.len() == tb.data.len()
                && ta
                    .data
                    .iter()
                    .zip(&tb.data)
                    .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
        })
}

/// The f_θ of a FIRE encoding, each layer's (none for a baseline).
fn mlps(encoding: &Encoding) -> Vec<&MlpParams> {
    match encoding {
        Encoding::Fire(f) => vec![&f.mlp],
        Encoding::FireShared(s) => vec![&s.module.mlp],
        Encoding::FirePerLayer(p) => p.modules.iter().map(|m| &m.mlp).collect(),
        Encoding::Baseline(_) => vec![],
    }
}

/// For each FIRE case of `ran` that failed, the index in `ran` of the first earlier FIRE case
/// whose output this one's repeats exactly although the two have other f_θ and expect
/// different values (beyond the failing case's tolerance on some output); `None` elsewhere.
/// Other f_θ: two cases that differ in a scalar only (c, L, ε) give one output wherever a
/// module ignores that scalar, a mistake of the maths the catalogue names; a module cannot
/// return the same values for two different f_θ without computing from neither.
pub(super) fn carried_over(
    ran: &[Ran],
    failed: &[bool],
    caps: &Capabilities,
) -> Vec<Option<usize>> {
    let other_mlp = |a: &Ran, b: &Ran| {
        let (x, y) = (mlps(&a.case.encoding), mlps(&b.case.encoding));
        !x.is_empty() && !y.is_empty() && x != y
    };
    let expects_otherwise = |earlier: &Ran, later: &Ran| {
        let (Some(a), Some(b)) = (
            expected_for(earlier.case, caps),
            expected_for(later.case, caps),
        ) else {
            return false;
        };
        b.iter().any(|(name, want)| {
            a.get(name)
                .is_none_or(|other| excess_ratio(other, want, later.profile, None) > 1.0)
        })
    };
    ran.iter()
        .zip(failed)
        .enumerate()
        .map(|(k, (later, &failing))| {
            if !failing || later.got.is_empty() {
                return None;
            }
            ran[..k].iter().position(|earlier| {
                other_mlp(earlier, later)
                    && identical(&earlier.got, &later.got)
                    && expects_otherwise(earlier, later)
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(data: Vec<f64>) -> BTreeMap<String, Tensor> {
        BTreeMap::from([("bias".to_owned(), Tensor::new(vec![data.len()], data))])
    }

    /// A repeated output of one value, or of none finite, carries nothing: a module returning
    /// zeros (or NaN) everywhere repeats itself on every case.
    #[test]
    fn only_an_output_that_varies_is_said_to_repeat() {
        let varied = output(vec![0.5, -1.25, 3.0]);
        assert!(identical(&varied, &varied.clone()));
        assert!(!identical(&varied, &output(vec![0.5, -1.25, 3.5])));
        let zeros = output(vec![0.0; 3]);
        assert!(!identical(&zeros, &zeros.clone()));
        let nan = output(vec![f64::NAN; 3]);
        assert!(!identical(&nan, &nan.clone()));
        let one_finite = output(vec![f64::NAN, 2.0, f64::NAN]);
        assert!(!identical(&one_finite, &one_finite.clone()));
    }
}
