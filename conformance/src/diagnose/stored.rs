//! Parameters held at a lower precision than the output: whether a failing output is the
//! reference's with FIRE's parameters rounded to float16, bfloat16 or float32.
//!
//! A module whose f_θ keeps its weights in float16 (Flax's `param_dtype=jnp.float16`, an MLP made
//! `.half()` that is cast back before it computes) computes in the dtype it is asked for from
//! parameters that cannot hold the case's values. Its output differs from the reference by the
//! parameters' rounding alone, a difference no catalogued mistake and no lower precision of the
//! arithmetic describes (the output is not 16-bit), and which, being mostly the output layer's
//! bias rounded, a constant per head, had been read as a shift per query row. Rounding the case's
//! parameters and evaluating the reference on them names it exactly. spec: [num.profiles]

use std::collections::BTreeMap;
use std::fmt;

use crate::compare::Profile;
use crate::diagnose::agrees;
use crate::implementation::{Capabilities, FutureKeys};
use crate::implementations::reference::evaluate_placed;
use crate::vectors::format::{Case, Encoding, FireParams, Kind, Tensor};

/// A lower-precision storage that reproduces an output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    /// `float16`, `bfloat16` or `float32`.
    pub format: &'static str,
    /// Which parameters it holds so.
    pub which: Which,
}

/// The parameters a lower-precision storage holds, in the order tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// f_θ's weights and biases (a layer made `.half()`, Flax's `param_dtype` on the `Dense`s).
    Mlp,
    /// c alone (a scalar made 16-bit on its own).
    C,
    /// c and L_multiplier.
    Scalars,
    /// Both.
    Every,
}

impl Which {
    const ALL: [Which; 4] = [Which::Mlp, Which::C, Which::Scalars, Which::Every];

    /// Its name in the JSON report.
    pub fn name(self) -> &'static str {
        match self {
            Which::Mlp => "mlp",
            Which::C => "c",
            Which::Scalars => "scalars",
            Which::Every => "every",
        }
    }

    /// The parameters any of `each` names, together (a case whose L_multiplier the format holds
    /// exactly names c alone, one whose c it holds names the rest).
    pub fn union(each: impl IntoIterator<Item = Which>) -> Which {
        let (mut mlp, mut c, mut m) = (false, false, false);
        for w in each {
            mlp |= w.mlp();
            c |= w.c();
            m |= w.multiplier();
        }
        match (mlp, c || m, m) {
            (true, true, _) => Which::Every,
            (false, true, true) => Which::Scalars,
            (false, true, false) => Which::C,
            _ => Which::Mlp,
        }
    }

    fn mlp(self) -> bool {
        matches!(self, Which::Mlp | Which::Every)
    }

    fn c(self) -> bool {
        self != Which::Mlp
    }

    fn multiplier(self) -> bool {
        matches!(self, Which::Scalars | Which::Every)
    }
}

impl Stored {
    /// The parameters it rounds, in words.
    pub fn what(&self) -> &'static str {
        match self.which {
            Which::Mlp => "f_θ's weights and biases",
            Which::C => "c",
            Which::Scalars => "c and L_multiplier",
            Which::Every => "every parameter (f_θ's weights and biases, c and L_multiplier)",
        }
    }
}

impl fmt::Display for Stored {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} rounded to {}", self.what(), self.format)
    }
}

/// A binary floating-point format: significant bits after the leading one, the exponent of its
/// smallest normal number (below which its spacing stays that of the subnormals), and that of
/// its largest.
pub(super) struct Format {
    pub(super) name: &'static str,
    pub(super) mantissa: i32,
    min_exponent: i32,
    max_exponent: i32,
}

impl Format {
    /// Whether `v` (finite) lies within the format's range: its largest finite value is
    /// (2 − 2^−mantissa) · 2^max_exponent (float16's 65 504), past which it holds ±∞.
    pub(super) fn holds(&self, v: f64) -> bool {
        v.abs() <= (2.0 - 2f64.powi(-self.mantissa)) * 2f64.powi(self.max_exponent)
    }
}

/// The storage formats tried, narrowest spacing first among those below a profile.
pub(super) const FORMATS: [Format; 3] = [
    Format {
        name: "float32",
        mantissa: 23,
        min_exponent: -126,
        max_exponent: 127,
    },
    Format {
        name: "float16",
        mantissa: 10,
        min_exponent: -14,
        max_exponent: 15,
    },
    Format {
        name: "bfloat16",
        mantissa: 7,
        min_exponent: -126,
        max_exponent: 127,
    },
];

/// `v` rounded to the nearest value of `format` (ties to even), subnormals included; values
/// past its largest are left as they are (no FIRE parameter of the suite comes near one).
pub(super) fn rounded(v: f64, format: &Format) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    let exponent = (v.abs().log2().floor() as i32).max(format.min_exponent);
    let spacing = 2f64.powi(exponent - format.mantissa);
    (v / spacing).round_ties_even() * spacing
}

fn round_all(t: &mut Tensor, format: &Format) {
    t.data.iter_mut().for_each(|v| *v = rounded(*v, format));
}

/// One module's parameters rounded, those `which` names.
fn round_module(p: &mut FireParams, format: &Format, which: Which) {
    if which.mlp() {
        for layer in &mut p.mlp.layers {
            round_all(&mut layer.weight, format);
            round_all(&mut layer.bias, format);
        }
    }
    if which.c() {
        p.c = rounded(p.c, format);
    }
    if which.multiplier() {
        p.l_multiplier = rounded(p.l_multiplier, format);
    }
}

/// The encoding with every FIRE module's parameters rounded; `None` for a baseline.
fn round_encoding(encoding: &Encoding, format: &Format, which: Which) -> Option<Encoding> {
    let mut changed = encoding.clone();
    match &mut changed {
        Encoding::Fire(p) => round_module(p, format, which),
        Encoding::FireShared(s) => round_module(&mut s.module, format, which),
        Encoding::FirePerLayer(p) => p
            .modules
            .iter_mut()
            .for_each(|m| round_module(m, format, which)),
        Encoding::Baseline(_) => return None,
    }
    Some(changed)
}

/// A gradient case's `predicted` with each gradient that `got` returns in `format` (every value
/// one of its values: a parameter's gradient comes back in the dtype the parameter is held in)
/// rounded to it as well. Not a bias: one rounded to the output's dtype is a lower precision of
/// the arithmetic ([`super::lower_precision`]), not of the parameters.
fn held_as(
    mut predicted: BTreeMap<String, Tensor>,
    got: &BTreeMap<String, Tensor>,
    format: &Format,
) -> BTreeMap<String, Tensor> {
    for (name, p) in &mut predicted {
        let held = got
            .get(name)
            .is_some_and(|g| g.data.iter().all(|&v| rounded(v, format) == v));
        if held {
            round_all(p, format);
        }
    }
    predicted
}

/// The narrowest-spaced storage below `profile` (f_θ's alone, then c, then c and L_multiplier,
/// then all) with which the reference reproduces `got` under the implementation's declarations;
/// `None` where none does, where the case is no FIRE case, or where the profile is no wider than
/// float32.
pub(super) fn lower_storage(
    case: &Case,
    got: &BTreeMap<String, Tensor>,
    profile: Profile,
    caps: &Capabilities,
    future: FutureKeys,
) -> Option<Stored> {
    let below: &[&str] = match profile.name {
        "f64" => &["float32", "float16", "bfloat16"],
        "f32" => &["float16", "bfloat16"],
        _ => return None,
    };
    // Outputs rounded to a format, gradients held in it, at the case's own parameters: rounding
    // of the output alone, which the precision of the arithmetic names, not the parameters'.
    let output_rounded = |format: &Format| {
        case.kind == Kind::Vjp
            && evaluate_placed(
                &case.encoding,
                case.kind,
                &case.inputs,
                None,
                caps.placement,
            )
            .is_ok_and(|reference| {
                agrees(
                    case,
                    &held_as(reference, got, format),
                    got,
                    profile,
                    future,
                    None,
                )
            })
    };
    for format in FORMATS.iter().filter(|f| below.contains(&f.name)) {
        if output_rounded(format) {
            return None;
        }
        for which in Which::ALL {
            let changed = round_encoding(&case.encoding, format, which)?;
            // Parameters the format holds exactly explain nothing by being held in it.
            if changed == case.encoding {
                continue;
            }
            let fits = evaluate_placed(&changed, case.kind, &case.inputs, None, caps.placement)
                .is_ok_and(|mut predicted| {
                    if case.kind == Kind::Vjp {
                        predicted = held_as(predicted, got, format);
                    }
                    agrees(case, &predicted, got, profile, future, None)
                });
            if fits {
                return Some(Stored {
                    format: format.name,
                    which,
                });
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_matches_the_formats_own_conversions() {
        let f32_format = &FORMATS[0];
        for v in [0.1, -1.0 / 3.0, 512.0, 1e-40, 6.02e23, -2.5e-7] {
            assert_eq!(rounded(v, f32_format), f64::from(v as f32), "{v}");
        }
        let f16 = &FORMATS[1];
        // 1 + 2^-10 is float16's next value after 1; 1 + 2^-11 ties to even (1).
        assert_eq!(rounded(1.0 + 2f64.powi(-11), f16), 1.0);
        assert_eq!(
            rounded(1.0 + 3.0 * 2f64.powi(-11), f16),
            1.0 + 2.0 * 2f64.powi(-10)
        );
        assert_eq!(rounded(0.1, f16), 0.099_975_585_937_5);
        // Subnormal: spacing 2^-24.
        assert_eq!(rounded(1e-6, f16), 17.0 * 2f64.powi(-24));
        let bf16 = &FORMATS[2];
        assert_eq!(rounded(0.1, bf16), 0.100_097_656_25);
        assert_eq!(rounded(-3.0, bf16), -3.0);
    }
}
