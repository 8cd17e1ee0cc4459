//! Alibi (Press et al. 2022): b_h(i, j) = −r_h·|i − j| with fixed geometric slopes.

use candle_core::{Device, Tensor};

use crate::encodings::{Grid, PositionEncoding};
use crate::error::{ensure, Result};
use crate::fast::{DistanceBias, DistanceEncoding};
use crate::fused::{values, FusedEncoding};

/// The standard slopes for `heads` heads: 2^(−8h/H) for a power of two H; otherwise those of
/// the closest lower power of two P, then every other slope of the 2P sequence.
pub fn slopes(heads: usize) -> Vec<f64> {
    // 2^(−8h/n) from its exact dyadic exponent (not as a repeated product, which drifts).
    fn power_of_two(n: usize) -> Vec<f64> {
        (1..=n)
            .map(|h| 2f64.powf(-8.0 * h as f64 / n as f64))
            .collect()
    }
    if heads == 0 {
        return Vec::new();
    }
    if heads.is_power_of_two() {
        return power_of_two(heads);
    }
    let p = 1usize << (usize::BITS - 1 - heads.leading_zeros());
    let mut out = power_of_two(p);
    out.extend(power_of_two(2 * p).into_iter().step_by(2).take(heads - p));
    out
}

/// Alibi: no trainable parameters; one bias shared by all layers.
#[derive(Debug, Clone)]
pub struct Alibi {
    /// r_h, `[H, 1, 1]`.
    pub slopes: Tensor,
}

impl Alibi {
    /// Alibi with the standard slopes.
    pub fn new(heads: usize, device: &Device) -> Result<Self> {
        Self::with_slopes(&slopes(heads), device)
    }

    /// Alibi with explicit slopes.
    pub fn with_slopes(slopes: &[f64], device: &Device) -> Result<Self> {
        ensure(!slopes.is_empty(), || {
            "Alibi needs at least one head".into()
        })?;
        let v: Vec<f32> = slopes.iter().map(|&s| s as f32).collect();
        Ok(Self {
            slopes: Tensor::from_vec(v, (slopes.len(), 1, 1), device)?,
        })
    }

    /// `[H, Q, K]`.
    pub fn bias_tensor(&self, grid: &Grid) -> Result<Tensor> {
        Ok(grid
            .distance
            .unsqueeze(0)?
            .broadcast_mul(&self.slopes)?
            .neg()?)
    }

    /// Row-major `[H, Q, K]` at arbitrary positions.
    pub fn bias(&self, queries: &[u64], keys: &[u64]) -> Result<Vec<f32>> {
        let grid = Grid::new(queries, keys, self.slopes.device())?;
        Ok(self.bias_tensor(&grid)?.flatten_all()?.to_vec1()?)
    }
}

impl PositionEncoding for Alibi {
    fn name(&self) -> &'static str {
        "alibi"
    }
    fn biases(&self, grid: &Grid, layers: usize) -> Result<Vec<Option<Tensor>>> {
        let once = self.bias_tensor(grid)?;
        Ok(vec![Some(once); layers])
    }
    fn tile_bias(&self, layers: usize, capacity: usize) -> Result<Option<FusedEncoding>> {
        let slopes = values(&self.slopes)?;
        let heads = slopes.len();
        let enc = DistanceEncoding::Alibi { slopes };
        let source = Box::new(DistanceBias::new(enc, heads, capacity)?);
        Ok(Some(FusedEncoding::shared(source, layers)))
    }
    fn train_bias(
        &self,
        layers: usize,
        n: usize,
        device: &Device,
    ) -> Result<Option<Vec<crate::fused_op::LayerBias>>> {
        crate::encodings::distance_tables(self, layers, n, device)
    }
}
