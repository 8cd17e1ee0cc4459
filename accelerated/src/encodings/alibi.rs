//! Alibi (Press et al. 2022): b_h(i, j) = −r_h·|i − j| with fixed geometric slopes.

use candle_core::{Device, Tensor};
use fire_kernels::{alibi_slopes, DeviceTables, DistanceBias, DistanceEncoding};

use crate::encodings::additive::AdditiveModule;
use crate::encodings::grid::{values, Grid};
use crate::error::{ensure, Result};

/// Alibi: no trainable parameters; one module shared by all layers.
#[derive(Debug, Clone)]
pub struct Alibi {
    /// r_h, `[H, 1, 1]`.
    pub slopes: Tensor,
}

impl Alibi {
    /// Alibi with the standard slopes ([`alibi_slopes`]).
    pub fn new(heads: usize, device: &Device) -> Result<Self> {
        Self::with_slopes(&alibi_slopes(heads), device)
    }

    /// Alibi with explicit slopes.
    pub fn with_slopes(slopes: &[f64], device: &Device) -> Result<Self> {
        // spec: [alibi.bias] — a slope that is not a positive number would be a silently wrong
        // bias, so it is refused.
        if let Some(bad) = slopes.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
            return Err(crate::error::Error::Config(format!(
                "Alibi slopes must be finite and > 0, got {bad}"
            )));
        }
        ensure(!slopes.is_empty(), || {
            "Alibi needs at least one head".into()
        })?;
        let v: Vec<f32> = slopes.iter().map(|&s| s as f32).collect();
        Ok(Self {
            slopes: Tensor::from_vec(v, (slopes.len(), 1, 1), device)?,
        })
    }
}

impl AdditiveModule for Alibi {
    fn heads(&self) -> usize {
        self.slopes.dims()[0]
    }

    fn device(&self) -> &Device {
        self.slopes.device()
    }

    fn bias_tensor(&self, grid: &Grid) -> Result<Tensor> {
        Ok(grid
            .distance
            .unsqueeze(0)?
            .broadcast_mul(&self.slopes)?
            .neg()?)
    }

    /// Tabulated from the module's own (f32) slopes, so the kernels and the candle path agree.
    fn source(&self, capacity: usize) -> Result<Box<dyn DeviceTables>> {
        let enc = DistanceEncoding::Alibi {
            slopes: values(&self.slopes)?,
        };
        Ok(Box::new(DistanceBias::new(enc, self.heads(), capacity)?))
    }
}
