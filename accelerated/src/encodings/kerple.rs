//! Kerple (Chi et al. 2022), as its reference code (`ParallelKerpleLog`/`ParallelKerplePower`):
//! log: −r1·ln(1 + r2·|i − j|); power: −r1·|i − j|^r2; r1 = `bias_p`, r2 = `bias_a`, one pair
//! per head and layer, both clamped to ≥ 0.01 (and r2 ≤ 2 for the power form).

use candle_core::{Device, Tensor};
use fire_kernels::{DeviceTables, DistanceBias, DistanceEncoding};

use crate::encodings::additive::AdditiveModule;
use crate::encodings::grid::{values, Grid};
use crate::error::{ensure, Result};
use crate::params::{Init, Path};

/// The clamp floor of both parameters in the reference code.
pub const EPS: f64 = 1e-2;

/// Which kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// −r1·ln(1 + r2·d).
    Log,
    /// −r1·d^r2.
    Power,
}

/// One layer's Kerple parameters.
#[derive(Debug, Clone)]
pub struct Kerple {
    /// The kernel.
    pub form: Form,
    /// r1, `[H, 1, 1]` (`bias_p`).
    pub bias_p: Tensor,
    /// r2, `[H, 1, 1]` (`bias_a`).
    pub bias_a: Tensor,
}

impl Kerple {
    /// Reference initialisation: r1 ~ U(0, 2), r2 ~ U(0, 1).
    pub fn new(form: Form, heads: usize, path: &mut Path<'_>) -> Result<Self> {
        Ok(Self {
            form,
            bias_p: path.param("bias_p", &[heads, 1, 1], Init::Uniform(0.0, 2.0))?,
            bias_a: path.param("bias_a", &[heads, 1, 1], Init::Uniform(0.0, 1.0))?,
        })
    }

    /// From explicit per-head values: the effective parameters, which [kerple.params] requires
    /// finite and > 0 (and r2 ≤ 2 for the power form) — explicit values are not clamped, an
    /// invalid one is refused. spec: [kerple.params]
    pub fn from_params(form: Form, r1: &[f64], r2: &[f64], device: &Device) -> Result<Self> {
        ensure(!r1.is_empty() && r1.len() == r2.len(), || {
            format!(
                "Kerple needs equal, non-empty r1/r2 lists, got {} and {}",
                r1.len(),
                r2.len()
            )
        })?;
        let bad = r1
            .iter()
            .chain(r2)
            .find(|v| !(v.is_finite() && **v > 0.0))
            .copied()
            .or_else(|| {
                r2.iter()
                    .find(|v| form == Form::Power && **v > 2.0)
                    .copied()
            });
        ensure(bad.is_none(), || {
            format!(
                "Kerple parameters must be finite and > 0 (power: r2 <= 2), got {}",
                bad.unwrap_or_default()
            )
        })?;
        let t = |v: &[f64]| {
            let v: Vec<f32> = v.iter().map(|&x| x as f32).collect();
            Tensor::from_vec(v, (r1.len(), 1, 1), device)
        };
        Ok(Self {
            form,
            bias_p: t(r1)?,
            bias_a: t(r2)?,
        })
    }
}

impl AdditiveModule for Kerple {
    fn heads(&self) -> usize {
        self.bias_p.dims()[0]
    }

    fn device(&self) -> &Device {
        self.bias_p.device()
    }

    fn bias_tensor(&self, grid: &Grid) -> Result<Tensor> {
        let p = self.bias_p.maximum(EPS)?;
        let d = grid.distance.unsqueeze(0)?;
        let kernel = match self.form {
            Form::Log => {
                let a = self.bias_a.maximum(EPS)?;
                (d.broadcast_mul(&a)? + 1.0)?.log()?
            }
            Form::Power => {
                let a = self.bias_a.clamp(EPS, 2.0)?;
                // d^a = exp(a·ln d) for d ≥ 1 and 0 at d = 0; ln(max(d, 1)) keeps the gradient
                // of a finite at d = 0 (distances are integers, so nothing lies in (0, 1)).
                let log_d = d.maximum(1.0)?.log()?;
                let pow = log_d.broadcast_mul(&a)?.exp()?;
                let zero = d.eq(0.0)?.broadcast_as(pow.shape())?;
                zero.where_cond(&pow.zeros_like()?, &pow)?
            }
        };
        Ok(kernel.broadcast_mul(&p)?.neg()?)
    }

    /// Tabulated from the current values, with the same clamps as [`Self::bias_tensor`].
    fn source(&self, capacity: usize) -> Result<Box<dyn DeviceTables>> {
        let r1: Vec<f64> = values(&self.bias_p)?.iter().map(|p| p.max(EPS)).collect();
        let a = values(&self.bias_a)?;
        let enc = match self.form {
            Form::Log => DistanceEncoding::KerpleLog {
                r1,
                r2: a.iter().map(|a| a.max(EPS)).collect(),
            },
            Form::Power => DistanceEncoding::KerplePower {
                r1,
                r2: a.iter().map(|a| a.clamp(EPS, 2.0)).collect(),
            },
        };
        Ok(Box::new(DistanceBias::new(enc, self.heads(), capacity)?))
    }
}
