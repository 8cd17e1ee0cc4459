//! FIRE: b(i, j) = f_θ( ψ(|i − j|) / (ψ(max(i, L)) + ε) ), one module per layer.
//!
//! spec: [fire.bias]

pub mod ablations;
pub mod activation;
pub mod grad;
pub mod init;
pub mod mlp;
pub mod shared;
pub mod transform;

use nalgebra::DVector;

use crate::bias::{AdditiveBias, Pair};
use crate::error::{checked, finite, Result};
use crate::positions::as_real;

pub use activation::Activation;
pub use mlp::{Linear, Mlp};

/// Which ψ the module applies and how the threshold L enters: plain words shared with the
/// other implementations (the maths of each is in [`transform`]). spec: [fire.psi],
/// [fire.threshold]
pub use fire_vocabulary::{Threshold, Transform};

/// The parameters of one FIRE module. spec: [fire.params]
#[derive(Debug, Clone, PartialEq)]
pub struct Fire {
    /// f_θ: R → R^H.
    pub mlp: Mlp,
    /// c of ψ_c (learnable; only |c| matters).
    pub c: f64,
    /// The frozen initial threshold L_init (> 0).
    pub l_init: f64,
    /// The learnable multiplier m of the threshold.
    pub l_multiplier: f64,
    /// ε, added to the log-normaliser.
    pub eps: f64,
    /// ψ: log (FIRE) or identity.
    pub transform: Transform,
    /// The threshold's role.
    pub threshold: Threshold,
}

impl Fire {
    /// L = |m·L_init|, or `None` when the threshold is disabled. spec: [fire.threshold]
    pub fn threshold_value(&self) -> Option<f64> {
        match self.threshold {
            Threshold::Disabled => None,
            Threshold::Learnable | Threshold::Fixed => {
                Some(transform::threshold(self.l_multiplier, self.l_init))
            }
        }
    }

    /// The MLP input x(i, j) for real-valued positions. spec: [fire.input]
    pub fn input(&self, i: f64, j: f64) -> f64 {
        transform::input(
            self.transform,
            self.c,
            i,
            j,
            self.threshold_value(),
            self.eps,
        )
    }

    /// b(i, j) ∈ R^H at real-valued positions. spec: [fire.bias]
    pub fn bias_at(&self, i: f64, j: f64) -> DVector<f64> {
        self.mlp.eval(self.input(i, j))
    }

    /// The magnitude bound of [num.compare] at one pair: per head, the sum of the absolute
    /// terms the output layer adds, `Σ_m |W_out[h, m]·a_m| + |b_out[h]|`. It bounds `|b_h|` and
    /// every value cancelled on the way, which is what rounding error scales with.
    /// spec: [num.compare]
    pub fn magnitude_at(&self, i: f64, j: f64) -> DVector<f64> {
        let (_, act) = self.mlp.trace(self.input(i, j));
        let last = &self.mlp.layers[self.mlp.layers.len() - 1];
        let a = &act[act.len() - 2];
        DVector::from_fn(last.weight.nrows(), |h, _| {
            let terms: f64 = (0..a.len())
                .map(|m| (last.weight[(h, m)] * a[m]).abs())
                .sum();
            terms + last.bias[h].abs()
        })
    }

    /// The number of trainable scalars, counted as in Appendix E (`init_L` is frozen and not
    /// counted; `L_multiplier` is counted unless the threshold is fixed or disabled).
    pub fn parameter_count(&self) -> usize {
        let m = usize::from(self.threshold == Threshold::Learnable);
        self.mlp.parameter_count() + 1 + m
    }
}

impl AdditiveBias for Fire {
    fn heads(&self) -> usize {
        self.mlp.heads()
    }

    /// spec: [fire.params], [num.errors]
    fn validate(&self) -> Result<()> {
        self.mlp.validate()?;
        finite("c", self.c)?;
        checked("L_init", self.l_init, self.l_init > 0.0, "L_init > 0")?;
        finite("L_multiplier", self.l_multiplier)?;
        checked("eps", self.eps, self.eps >= 0.0, "eps >= 0")?;
        if self.transform == Transform::Log {
            // |c| = 0 makes ψ ≡ 0 and every input 0/ε: the encoding would silently vanish.
            checked("c", self.c, self.c != 0.0, "c != 0 with the log transform")?;
        }
        if self.threshold == Threshold::Disabled && self.eps == 0.0 {
            return Err(crate::Error::Invalid {
                what: "FIRE without threshold".into(),
                reason: "eps = 0 divides 0 by 0 at query position 0".into(),
            });
        }
        if self.threshold != Threshold::Disabled && self.eps == 0.0 {
            checked(
                "L_multiplier",
                self.l_multiplier,
                self.l_multiplier != 0.0,
                "L_multiplier != 0 when eps = 0 (L = 0 divides 0 by 0 at query 0)",
            )?;
        }
        Ok(())
    }

    /// spec: [fire.bias], [conv.future]
    fn bias(&self, pair: Pair) -> DVector<f64> {
        self.bias_at(as_real(pair.i), as_real(pair.j))
    }

    /// log1p's domain is `z > −1`: a pre-activation at or below it would give −∞ or NaN, a
    /// silently wrong number, so the pair is refused instead. spec: [fire.activation], [num.errors]
    fn check_pair(&self, pair: Pair) -> Result<()> {
        self.mlp
            .check_domain(self.input(as_real(pair.i), as_real(pair.j)))
            .map_err(|e| match e {
                crate::Error::Invalid { what, reason } => crate::Error::Invalid {
                    what,
                    reason: format!("{reason} at query {} and key {}", pair.i, pair.j),
                },
                other => other,
            })
    }
}
