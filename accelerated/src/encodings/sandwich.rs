//! Sandwich (Chi et al. 2023) in NeMo's form, for head h = 1..H and head width d:
//! b_h(i, j) = (Σ_{k=1}^{d/2} cos(|i − j| / 10000^{2k/d}) − d/2) / (h·8/H). No parameters.

use candle_core::{Device, Tensor, D};
use fire_kernels::{DeviceTables, DistanceBias, DistanceEncoding};

use crate::encodings::additive::AdditiveModule;
use crate::encodings::grid::Grid;
use crate::error::{ensure, Result};

/// Sandwich.
#[derive(Debug, Clone)]
pub struct Sandwich {
    /// 10000^(−2k/d), k = 1..d/2, `[d/2]`.
    pub inv_freq: Tensor,
    /// h·8/H, `[H, 1, 1]`.
    pub scales: Tensor,
    /// d/2.
    pub half: usize,
}

impl Sandwich {
    /// Sandwich for `heads` heads of width `head_dim`.
    pub fn new(heads: usize, head_dim: usize, device: &Device) -> Result<Self> {
        ensure(heads > 0 && head_dim >= 2, || {
            format!("Sandwich needs heads > 0 and head_dim >= 2, got {heads}, {head_dim}")
        })?;
        let half = head_dim / 2;
        let inv: Vec<f32> = (1..=half)
            .map(|k| 10000f64.powf(-2.0 * k as f64 / head_dim as f64) as f32)
            .collect();
        let scales: Vec<f32> = (1..=heads)
            .map(|h| (h as f64 * 8.0 / heads as f64) as f32)
            .collect();
        Ok(Self {
            inv_freq: Tensor::from_vec(inv, half, device)?,
            scales: Tensor::from_vec(scales, (heads, 1, 1), device)?,
            half,
        })
    }
}

impl AdditiveModule for Sandwich {
    fn heads(&self) -> usize {
        self.scales.dims()[0]
    }

    fn device(&self) -> &Device {
        self.inv_freq.device()
    }

    fn bias_tensor(&self, grid: &Grid) -> Result<Tensor> {
        let angles = grid.distance.unsqueeze(2)?.broadcast_mul(&self.inv_freq)?;
        let sum = (angles.cos()?.sum(D::Minus1)? - self.half as f64)?;
        Ok(sum.unsqueeze(0)?.broadcast_div(&self.scales)?)
    }

    fn source(&self, capacity: usize) -> Result<Box<dyn DeviceTables>> {
        let enc = DistanceEncoding::Sandwich {
            heads: self.heads(),
            dim: 2 * self.half,
        };
        Ok(Box::new(DistanceBias::new(enc, self.heads(), capacity)?))
    }
}
