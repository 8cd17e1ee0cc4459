//! The comparison rule and the tolerance profiles, and a failure report that shows the worst
//! element, how many differ and the first few (the faer habit).
//!
//! spec: [num.compare], [num.profiles]

use std::fmt;

use crate::vectors::format::Tensor;

/// A tolerance profile: `|got − want| ≤ atol + rtol · scale`. spec: [num.profiles]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Profile {
    /// The name used in files and reports.
    pub name: &'static str,
    /// Absolute tolerance.
    pub atol: f64,
    /// Tolerance relative to the output's stated `scale`.
    pub rtol: f64,
    /// Higher is more precise; a dtype runs the cases whose profile rank it meets.
    pub rank: u8,
}

/// The profiles of [num.profiles], most precise first.
pub const PROFILES: &[Profile] = &[
    Profile {
        name: "exact",
        atol: 0.0,
        rtol: 0.0,
        rank: 0,
    },
    Profile {
        name: "f64",
        atol: 0.0,
        rtol: 1e-12,
        rank: 3,
    },
    Profile {
        name: "f32",
        atol: 0.0,
        rtol: 1e-5,
        rank: 2,
    },
    Profile {
        name: "bf16",
        atol: 0.0,
        rtol: 3e-2,
        rank: 1,
    },
];

/// Looks a profile up by name.
pub fn profile(name: &str) -> Option<Profile> {
    PROFILES.iter().copied().find(|p| p.name == name)
}

/// The profile a case is graded at, for an implementation computing in `dtype`, or `None` when
/// the dtype is too imprecise for the case (the case is skipped with that reason).
/// `exact` cases are graded exactly whatever the dtype. spec: [num.profiles]
pub fn grading(case_profile: &str, dtype: &str) -> Option<Profile> {
    let case = profile(case_profile)?;
    let own = profile(dtype)?;
    if case.name == "exact" {
        Some(case)
    } else if own.rank >= case.rank {
        Some(own)
    } else {
        None
    }
}

/// One compared element.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Element {
    /// Flat row-major index.
    pub flat: usize,
    /// What the implementation gave.
    pub got: f64,
    /// What the vector expects.
    pub want: f64,
    /// `|got − want|` (NaN or ∞ when either side is not finite).
    pub diff: f64,
    /// `atol + rtol · scale`.
    pub allowed: f64,
}

/// Why an output did not match.
#[derive(Debug, Clone, PartialEq)]
pub enum Mismatch {
    /// The output is absent from the reply.
    Missing,
    /// The shape differs.
    Shape {
        /// Expected shape.
        want: Vec<usize>,
        /// Shape given.
        got: Vec<usize>,
    },
    /// Some elements are out of tolerance.
    Values {
        /// How many elements differ.
        count: usize,
        /// How many were checked.
        checked: usize,
        /// The element with the largest `diff − allowed` (non-finite differences first).
        worst: Element,
        /// The first few in index order.
        first: Vec<Element>,
    },
}

/// How many mismatching elements a report lists after the worst.
pub const FIRST: usize = 5;

fn excess(e: &Element) -> f64 {
    if e.diff.is_finite() {
        e.diff - e.allowed
    } else {
        f64::INFINITY
    }
}

/// One element under the rule: non-finite values compare by identity; `-0.0 == 0.0`.
/// spec: [num.compare]
pub fn element_ok(got: f64, want: f64, allowed: f64) -> bool {
    if !want.is_finite() || !got.is_finite() {
        return (got.is_nan() && want.is_nan()) || got == want;
    }
    (got - want).abs() <= allowed
}

/// Compares `got` with `want` elementwise, at the elements `check` selects (all when `None`).
/// spec: [num.compare]
pub fn compare(
    got: &Tensor,
    want: &Tensor,
    profile: Profile,
    check: Option<&[bool]>,
) -> Result<(), Mismatch> {
    compare_either(got, want, &[], profile, check).map(|_| ())
}

/// [`compare`], where an element also passes when it matches the same element of one of
/// `acceptable` (a case's acceptable alternatives, [vec.case]). Returns how many elements
/// passed only through an alternative. spec: [num.compare]
pub fn compare_either(
    got: &Tensor,
    want: &Tensor,
    acceptable: &[Tensor],
    profile: Profile,
    check: Option<&[bool]>,
) -> Result<usize, Mismatch> {
    let mut alternative = 0;
    if got.shape != want.shape || got.data.len() != want.data.len() {
        return Err(Mismatch::Shape {
            want: want.shape.clone(),
            got: got.shape.clone(),
        });
    }
    let scale = want.scale.unwrap_or_else(|| {
        want.data
            .iter()
            .filter(|v| v.is_finite())
            .fold(0.0, |a, v| a.max(v.abs()))
    });
    let allowed = profile.atol + profile.rtol * scale;
    let mut count = 0;
    let mut checked = 0;
    let mut worst: Option<Element> = None;
    let mut first = Vec::new();
    for (flat, (&g, &w)) in got.data.iter().zip(&want.data).enumerate() {
        if check.is_some_and(|c| !c.get(flat).copied().unwrap_or(true)) {
            continue;
        }
        checked += 1;
        if element_ok(g, w, allowed) {
            continue;
        }
        if acceptable
            .iter()
            .any(|a| a.data.get(flat).is_some_and(|&a| element_ok(g, a, allowed)))
        {
            alternative += 1;
            continue;
        }
        count += 1;
        let e = Element {
            flat,
            got: g,
            want: w,
            diff: (g - w).abs(),
            allowed,
        };
        if first.len() < FIRST {
            first.push(e);
        }
        if worst.is_none_or(|x| excess(&e) > excess(&x)) {
            worst = Some(e);
        }
    }
    match worst {
        None => Ok(alternative),
        Some(worst) => Err(Mismatch::Values {
            count,
            checked,
            worst,
            first,
        }),
    }
}

/// How far `got` is from `want` in units of the tolerance: the largest `|got − want| / allowed`
/// over the elements `check` selects, `allowed = atol + rtol·max(scale, |want|)` per element
/// (≤ 1 means [`compare`] passes: `scale` bounds the expected values; 0 for equal values; ∞ for
/// a differing shape, a different non-finite pattern, or nothing to check). Diagnosis ranks
/// candidate explanations by it, with `want` a mistake's prediction, whose elements can be far
/// larger than the case's scale and their rounding with them. spec: [num.compare],
/// [num.diagnosis]
pub fn excess_ratio(got: &Tensor, want: &Tensor, profile: Profile, check: Option<&[bool]>) -> f64 {
    if got.shape != want.shape || got.data.len() != want.data.len() {
        return f64::INFINITY;
    }
    let scale = want.scale.unwrap_or_else(|| {
        want.data
            .iter()
            .filter(|v| v.is_finite())
            .fold(0.0, |a, v| a.max(v.abs()))
    });
    let mut worst: f64 = 0.0;
    let mut checked = 0;
    for (flat, (&g, &w)) in got.data.iter().zip(&want.data).enumerate() {
        if check.is_some_and(|c| !c.get(flat).copied().unwrap_or(true)) {
            continue;
        }
        checked += 1;
        let allowed = profile.atol + profile.rtol * scale.max(w.abs());
        let r = if element_ok(g, w, 0.0) {
            0.0
        } else if !g.is_finite() || !w.is_finite() || allowed == 0.0 {
            f64::INFINITY
        } else {
            (g - w).abs() / allowed
        };
        worst = worst.max(r);
    }
    if checked == 0 {
        f64::INFINITY
    } else {
        worst
    }
}

/// Formats an element with its multi-index in `shape`.
#[derive(Debug)]
pub struct Shown<'a>(pub &'a Element, pub &'a [usize]);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = Tensor::new(self.1.to_vec(), vec![]);
        let e = self.0;
        write!(
            f,
            "{:?} got {:e} want {:e} diff {:.3e} allowed {:.3e}",
            t.index_of(e.flat),
            e.got,
            e.want,
            e.diff,
            e.allowed
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(data: Vec<f64>) -> Tensor {
        Tensor::new(vec![2, data.len() / 2], data)
    }

    #[test]
    fn rule_uses_the_stated_scale_not_the_element() {
        let want = t(vec![1e-9, 2.0, 3.0, 4.0]).with_scale(4.0);
        let f32p = profile("f32").unwrap();
        // 1e-7 off a 1e-9 element is within 1e-5 · 4.
        assert!(compare(&t(vec![1e-7, 2.0, 3.0, 4.0]), &want, f32p, None).is_ok());
        let err = compare(&t(vec![1e-7, 2.0, 3.1, 4.0]), &want, f32p, None).unwrap_err();
        match err {
            Mismatch::Values { count, worst, .. } => {
                assert_eq!(count, 1);
                assert_eq!(worst.flat, 2);
                assert!((worst.allowed - 4e-5).abs() < 1e-18);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn non_finite_compare_by_identity_and_nan_always_fails() {
        let p = profile("bf16").unwrap();
        assert!(element_ok(f64::NEG_INFINITY, f64::NEG_INFINITY, 0.0));
        assert!(!element_ok(f64::INFINITY, f64::NEG_INFINITY, 1.0));
        assert!(!element_ok(f64::NAN, 1.0, 1e9));
        assert!(element_ok(-0.0, 0.0, 0.0));
        let err = compare(&t(vec![f64::NAN, 1.0]), &t(vec![0.5, 1.0]), p, None).unwrap_err();
        assert!(matches!(err, Mismatch::Values { count: 1, .. }));
    }

    #[test]
    fn shapes_must_match_and_masked_elements_are_ignored() {
        let p = profile("exact").unwrap();
        let err = compare(
            &Tensor::new(vec![4], vec![0.0; 4]),
            &t(vec![0.0; 4]),
            p,
            None,
        );
        assert!(matches!(err, Err(Mismatch::Shape { .. })));
        let mask = [true, false, true, true];
        assert!(compare(
            &t(vec![0.0, 9.0, 0.0, 0.0]),
            &t(vec![0.0; 4]),
            p,
            Some(&mask)
        )
        .is_ok());
    }

    #[test]
    fn grading_runs_only_what_the_dtype_meets() {
        assert_eq!(grading("f32", "f64").unwrap().name, "f64");
        assert_eq!(grading("bf16", "f32").unwrap().name, "f32");
        assert!(grading("f64", "f32").is_none());
        assert_eq!(grading("exact", "bf16").unwrap().name, "exact");
    }
}
