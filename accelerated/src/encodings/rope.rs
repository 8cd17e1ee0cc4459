//! RoPE (Su et al. 2021) in the GPT-NeoX "rotate half" layout, and RoPE-PI (Chen et al. 2023),
//! which divides positions by a scale fixed before training or fine-tuning.

use candle_core::{Device, Tensor, D};

use crate::encodings::encoding::PositionEncoding;
use crate::encodings::grid::Grid;
use crate::error::{ensure, Result};

/// Rotary embeddings with base θ and position scale `s` (`s = 1`: RoPE; `s > 1`: RoPE-PI).
#[derive(Debug, Clone)]
pub struct Rope {
    /// θ.
    pub theta: f64,
    /// Positions are divided by this.
    pub scale: f64,
    /// Head dimension (even).
    pub head_dim: usize,
}

impl Rope {
    /// A rotary encoding for heads of width `head_dim`.
    pub fn new(theta: f64, scale: f64, head_dim: usize) -> Result<Self> {
        ensure(head_dim.is_multiple_of(2) && head_dim > 0, || {
            format!("RoPE needs an even head dimension, got {head_dim}")
        })?;
        ensure(theta > 1.0 && scale > 0.0, || {
            format!("RoPE needs theta > 1 and scale > 0, got {theta}, {scale}")
        })?;
        Ok(Self {
            theta,
            scale,
            head_dim,
        })
    }

    /// cos and sin of every (position, frequency) angle, `[T, d/2]`, computed in f64.
    pub fn tables(&self, positions: &[u64], device: &Device) -> Result<(Tensor, Tensor)> {
        let half = self.head_dim / 2;
        let mut cos = Vec::with_capacity(positions.len() * half);
        let mut sin = Vec::with_capacity(positions.len() * half);
        for &p in positions {
            let p = p as f64 / self.scale;
            for k in 0..half {
                let freq = self.theta.powf(-2.0 * k as f64 / self.head_dim as f64);
                cos.push((p * freq).cos() as f32);
                sin.push((p * freq).sin() as f32);
            }
        }
        Ok((
            Tensor::from_vec(cos, (positions.len(), half), device)?,
            Tensor::from_vec(sin, (positions.len(), half), device)?,
        ))
    }
}

impl PositionEncoding for Rope {
    fn name(&self) -> &'static str {
        if self.scale == 1.0 {
            "rope"
        } else {
            "rope-pi"
        }
    }

    fn biases(&self, _grid: &Grid, layers: usize) -> Result<Vec<Option<Tensor>>> {
        Ok(vec![None; layers])
    }

    /// `[x1·cos − x2·sin, x2·cos + x1·sin]` with `x = [x1, x2]` split in halves.
    fn rotate(&self, x: &Tensor, positions: &[u64]) -> Result<Tensor> {
        let (cos, sin) = self.tables(positions, x.device())?;
        let half = self.head_dim / 2;
        let x1 = x.narrow(D::Minus1, 0, half)?;
        let x2 = x.narrow(D::Minus1, half, half)?;
        let a = (x1.broadcast_mul(&cos)? - x2.broadcast_mul(&sin)?)?;
        let b = (x2.broadcast_mul(&cos)? + x1.broadcast_mul(&sin)?)?;
        Ok(Tensor::cat(&[a, b], D::Minus1)?)
    }
}

/// The slow, obvious twin of [`Rope::rotate`] for one vector: the 2-D rotation of each pair
/// `(x_k, x_{k+d/2})` by angle `p/s · θ^(−2k/d)`, in f64.
pub fn rotate_slow(rope: &Rope, x: &[f64], position: u64) -> Vec<f64> {
    let half = rope.head_dim / 2;
    let mut out = x.to_vec();
    let p = position as f64 / rope.scale;
    for k in 0..half {
        let angle = p * rope.theta.powf(-2.0 * k as f64 / rope.head_dim as f64);
        let (s, c) = angle.sin_cos();
        out[k] = x[k] * c - x[k + half] * s;
        out[k + half] = x[k + half] * c + x[k] * s;
    }
    out
}
