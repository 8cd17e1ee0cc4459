//! The cases at the spec's initial values ([fire.defaults]): whether a failing output is the
//! reference's with one of them changed.
//!
//! A module built on its own defaults (as the ready-made glues build one on these cases) whose
//! constructor starts c, L_init, the multiplier or ε elsewhere than the spec computes exactly
//! that, and on some inputs it also matches a catalogued variant by coincidence: with L_init
//! = 256, every query at or past 256 is normalised by ψ(i) alone, which is what
//! `threshold-ignored` computes, and a report naming only that variant sends the user after a
//! missing `max(·, L)` that is there. The values tried are the ones modules are written with
//! (powers of two for L_init, decades for c and ε, halves and doubles for the multiplier, and
//! L_init with the multiplier that keeps the spec's threshold, L_init = 1 024 and m = 0.5); the
//! degenerate ones (L_init or the multiplier 0, ε 0) are left to the catalogue's variants that
//! name them (`threshold-ignored`, `eps-missing`). spec: [fire.defaults], [variants.catalogue]

use std::collections::BTreeMap;
use std::fmt;

use fire_reference::fire::init;
use fire_reference::variants::Variant;

use crate::compare::Profile;
use crate::conventions::causal_cotangent;
use crate::diagnose::agrees;
use crate::implementation::{Capabilities, FutureKeys};
use crate::implementations::reference::evaluate_placed;
use crate::vectors::format::{Case, Encoding, FireParams, Kind, Tensor};

/// An initial value other than the spec's that reproduces an output.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OtherInitial {
    /// The scalar, as the paper names it (`c`, `L_init`, `L_multiplier`, `ε`).
    pub name: &'static str,
    /// The value that reproduces the output.
    pub value: f64,
    /// [fire.defaults]' value.
    pub spec: f64,
}

impl OtherInitial {
    /// The threshold L = |m·L_init| it implies, where it concerns L.
    pub fn threshold(&self) -> Option<f64> {
        match self.name {
            THRESHOLD | "L_init" => Some(self.value * init::L_MULTIPLIER),
            "L_multiplier" => Some(self.value * init::L_INIT),
            SPLIT => Some(init::L_INIT * init::L_MULTIPLIER),
            _ => None,
        }
    }
}

impl fmt::Display for OtherInitial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.name == THRESHOLD {
            // Only the product shows in a bias: either factor may be the one.
            return write!(
                f,
                "the threshold L = |m·L_init| = {} ([fire.defaults]: {}: an initial L_init of {} or L_multiplier of {})",
                self.value,
                self.spec,
                self.value / init::L_MULTIPLIER,
                self.value / init::L_INIT
            );
        }
        if self.name == SPLIT {
            // The threshold the spec's, its factors not: only the multiplier's gradient shows.
            let m = init::L_INIT * init::L_MULTIPLIER / self.value;
            return write!(
                f,
                "L_init = {} and L_multiplier = {m} (the threshold L = |m·L_init| = {} is [fire.defaults]' own, split otherwise than its L_init = {} and m = {}: the multiplier's gradient, L_init·∂b/∂L, is {}× the spec's, so the threshold trains at another rate)",
                self.value,
                init::L_INIT * init::L_MULTIPLIER,
                self.spec,
                init::L_MULTIPLIER,
                self.value / init::L_INIT
            );
        }
        write!(
            f,
            "{} = {} ([fire.defaults]: {})",
            self.name, self.value, self.spec
        )
    }
}

/// [`OtherInitial::name`] of the threshold L itself: a bias depends on the multiplier and
/// L_init only through their product, a gradient tells them apart.
pub const THRESHOLD: &str = "L";

/// [`OtherInitial::name`] of L_init with the multiplier making up the spec's threshold
/// (L_init = 1 024, m = 0.5): the bias is the spec's, the multiplier's gradient is not.
pub const SPLIT: &str = "L_init and L_multiplier";

/// A scalar of [fire.defaults], its value there, the other values tried for it, and for which
/// kinds of case: `Some(true)` gradient cases only, `Some(false)` the others only.
struct Scalar {
    name: &'static str,
    spec: f64,
    tried: &'static [f64],
    set: fn(&mut FireParams, f64),
    gradients: Option<bool>,
}

/// Thresholds tried: powers of two around 512 (as L, as L_init, and as multipliers of 512),
/// then a block size less or more one (a threshold of 511 had been named 256 on a case whose
/// queries are all past both, and "no catalogued variant" on the others).
const THRESHOLDS: &[f64] = &[
    256.0, 1024.0, 2048.0, 128.0, 4096.0, 64.0, 8192.0, 32.0, 16.0, 511.0, 513.0, 1023.0, 2047.0,
];

const SCALARS: &[Scalar] = &[
    Scalar {
        name: THRESHOLD,
        spec: init::L_INIT * init::L_MULTIPLIER,
        tried: THRESHOLDS,
        set: |p, v| p.l_init = v / init::L_MULTIPLIER,
        gradients: Some(false),
    },
    Scalar {
        name: "L_init",
        spec: init::L_INIT,
        tried: THRESHOLDS,
        set: |p, v| p.l_init = v,
        gradients: Some(true),
    },
    Scalar {
        name: "L_multiplier",
        spec: init::L_MULTIPLIER,
        tried: &[0.5, 2.0, 0.25, 4.0, 0.125, 8.0],
        set: |p, v| p.l_multiplier = v,
        gradients: Some(true),
    },
    Scalar {
        name: SPLIT,
        spec: init::L_INIT,
        tried: &[1024.0, 256.0, 2048.0, 128.0, 4096.0],
        set: |p, v| {
            p.l_init = v;
            p.l_multiplier = init::L_INIT * init::L_MULTIPLIER / v;
        },
        gradients: Some(true),
    },
    Scalar {
        name: "c",
        spec: init::C,
        // −0.1 last: the bias is the same as at 0.1 (only |c| enters FIRE), the gradient of c
        // is not (a module starting c at −0.1 had been told to look for a detached parameter).
        tried: &[1.0, 0.01, 0.5, 0.2, 0.05, 0.001, 2.0, -init::C],
        set: |p, v| p.c = v,
        gradients: None,
    },
    Scalar {
        name: "ε",
        spec: init::EPS,
        // No value below 1e-8: at any profile it is ε = 0, which `eps-missing` names (an ε of 0
        // had been reported as 1e-12).
        tried: &[1e-3, 1e-5, 1e-8, 1e-4, 1e-7],
        set: |p, v| p.eps = v,
        gradients: None,
    },
];

/// The FIRE module of an encoding: one module, or FIRE-S's shared one.
fn module_mut(encoding: &mut Encoding) -> Option<&mut FireParams> {
    match encoding {
        Encoding::Fire(p) => Some(p),
        Encoding::FireShared(s) => Some(&mut s.module),
        _ => None,
    }
}

/// Whether a case's FIRE is at [fire.defaults]' initial values.
pub fn at_defaults(case: &Case) -> bool {
    let p = match &case.encoding {
        Encoding::Fire(p) => p,
        Encoding::FireShared(s) => &s.module,
        _ => return false,
    };
    p.c == init::C
        && p.l_init == init::L_INIT
        && p.l_multiplier == init::L_MULTIPLIER
        && p.eps == init::EPS
        && p.threshold == "learnable"
        && p.transform == "log"
}

/// The other initial values of the first scalar (the threshold or its factors, c, ε, in that
/// order) with which the reference reproduces `got` within `profile` under the implementation's
/// declarations, every one of them in the order tried: a case's positions may not tell some
/// apart (every query past both 256 and 511), and the run names the one its cases share.
/// Empty off the defaults or when none does.
pub fn other_initial(
    case: &Case,
    got: &BTreeMap<String, Tensor>,
    profile: Profile,
    caps: &Capabilities,
    future: FutureKeys,
) -> Vec<OtherInitial> {
    other_initial_under(case, got, profile, caps, future, None)
}

/// [`other_initial`] of the catalogue's `variant` rather than the reference: the initial values
/// with which that mistake reproduces `got` (a module with the mistake whose constructor also
/// starts a scalar elsewhere). Empty where the variant reproduces it at the spec's values.
pub fn other_initial_under(
    case: &Case,
    got: &BTreeMap<String, Tensor>,
    profile: Profile,
    caps: &Capabilities,
    future: FutureKeys,
    variant: Option<&Variant>,
) -> Vec<OtherInitial> {
    if !at_defaults(case) {
        return vec![];
    }
    // A gradient case graded under a declared convention for keys after the query is graded
    // against the cotangent restricted to the causal pairs ([`crate::grade::expected_for`]):
    // predicted so as well.
    let mut inputs = case.inputs.clone();
    if case.kind == Kind::Vjp && crate::grade::expected_for(case, caps) != case.expected.as_ref() {
        let Some(cotangent) = causal_cotangent(&case.inputs) else {
            return vec![];
        };
        inputs.cotangent = Some(cotangent);
    }
    // An output the spec's own values reproduce (the reference's: it failed for something no
    // initial value changes, an output the case did not ask for, say the gradient of a trained
    // L_init; the variant's: the mistake alone explains it) needs no other value, and any
    // value close enough to the spec's would "reproduce" it too (an ε of 1e-5 had been named).
    let agrees_with = |encoding: &Encoding| {
        evaluate_placed(encoding, case.kind, &inputs, variant, caps.placement)
            .is_ok_and(|predicted| agrees(case, &predicted, got, profile, future, None))
    };
    if agrees_with(&case.encoding) {
        return vec![];
    }
    let gradients = case.kind == Kind::Vjp;
    for s in SCALARS
        .iter()
        .filter(|s| s.gradients.is_none_or(|g| g == gradients))
    {
        let fitting: Vec<OtherInitial> = s
            .tried
            .iter()
            .filter(|&&value| {
                let mut changed = case.encoding.clone();
                if let Some(p) = module_mut(&mut changed) {
                    (s.set)(p, value);
                }
                agrees_with(&changed)
            })
            .map(|&value| OtherInitial {
                name: s.name,
                value,
                spec: s.spec,
            })
            .collect();
        if !fitting.is_empty() {
            return fitting;
        }
    }
    vec![]
}
