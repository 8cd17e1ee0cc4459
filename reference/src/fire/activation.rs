//! The activation functions σ the MLP family f_θ admits.
//!
//! ReLU and GeLU are what FIRE trains with; identity, Heaviside, power, log1p and cos exist
//! because the Theorem 3.1 constructions need them.

use crate::error::{checked, Result};

/// `max(z, 0)`, propagating NaN as `torch.relu` and `jax.nn.relu` do (`f64::max` would turn a
/// NaN into 0 and hide where a computation went wrong). spec: [fire.activation]
pub fn relu(z: f64) -> f64 {
    if z.is_nan() || z > 0.0 {
        z
    } else {
        0.0
    }
}

/// An activation σ: R → R. spec: [fire.activation]
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Activation {
    /// `max(z, 0)`; derivative 0 at the kink z = 0 (PyTorch and JAX).
    Relu,
    /// The exact GeLU `z·Φ(z) = z/2·(1 + erf(z/√2))` (PyTorch `nn.GELU()` default).
    Gelu,
    /// `z`.
    Identity,
    /// `1` if `z ≥ 0`, else `0`.
    Heaviside,
    /// `max(z, 0)^p`, `p > 0`.
    Power(f64),
    /// `ln(1 + z)` for `z > −1`.
    Log1p,
    /// `cos z`.
    Cos,
}

impl Activation {
    /// Checks the activation's own parameter. spec: [fire.activation]
    pub fn validate(&self) -> Result<()> {
        if let Activation::Power(p) = *self {
            checked("activation power p", p, p > 0.0, "p > 0")?;
        }
        Ok(())
    }

    /// True when σ is defined at `z`: everywhere but log1p, which needs `z > −1`. A NaN `z`
    /// is not judged here (it comes from an earlier mistake, not from the domain).
    /// spec: [fire.activation]
    pub fn in_domain(&self, z: f64) -> bool {
        match *self {
            Activation::Log1p => z.is_nan() || z > -1.0,
            _ => true,
        }
    }

    /// σ(z). spec: [fire.activation]
    pub fn apply(&self, z: f64) -> f64 {
        match *self {
            Activation::Relu => relu(z),
            Activation::Gelu => 0.5 * z * (1.0 + libm::erf(z / std::f64::consts::SQRT_2)),
            Activation::Identity => z,
            Activation::Heaviside => {
                if z.is_nan() {
                    z
                } else if z >= 0.0 {
                    1.0
                } else {
                    0.0
                }
            }
            Activation::Power(p) => relu(z).powf(p),
            Activation::Log1p => z.ln_1p(),
            Activation::Cos => z.cos(),
        }
    }

    /// σ'(z), with the sub-gradient convention of [grad.kinks] at every kink.
    /// spec: [grad.kinks]
    pub fn derivative(&self, z: f64) -> f64 {
        match *self {
            Activation::Relu => {
                if z > 0.0 {
                    1.0
                } else {
                    0.0
                }
            }
            Activation::Gelu => {
                let phi = (-0.5 * z * z).exp() / (2.0 * std::f64::consts::PI).sqrt();
                0.5 * (1.0 + libm::erf(z / std::f64::consts::SQRT_2)) + z * phi
            }
            Activation::Identity => 1.0,
            Activation::Heaviside => 0.0,
            Activation::Power(p) => {
                if z > 0.0 {
                    p * z.powf(p - 1.0)
                } else {
                    0.0
                }
            }
            Activation::Log1p => 1.0 / (1.0 + z),
            Activation::Cos => -z.sin(),
        }
    }

    /// The stable name used in the spec and the vectors.
    pub fn name(&self) -> String {
        match *self {
            Activation::Relu => "relu".into(),
            Activation::Gelu => "gelu".into(),
            Activation::Identity => "identity".into(),
            Activation::Heaviside => "heaviside".into(),
            Activation::Power(p) => format!("power({p})"),
            Activation::Log1p => "log1p".into(),
            Activation::Cos => "cos".into(),
        }
    }
}
