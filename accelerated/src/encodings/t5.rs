//! T5's relative position bias with the official log-binned buckets (mesh-tensorflow
//! `_relative_position_bucket`, unidirectional): one learned scalar per (bucket, head), the
//! table shared by all layers. Keys after the query fall in bucket 0 (n = max(i − j, 0)).

use candle_core::{Device, Tensor};

use crate::encodings::{Grid, PositionEncoding};
use crate::error::{ensure, Result};
use crate::fast::{DistanceBias, DistanceEncoding};
use crate::fused::{values, FusedEncoding};
use crate::params::{Init, Path};

/// The causal bucket of distance `n = max(i − j, 0)`:
/// `n` if `n < N/2`, else `min(N − 1, N/2 + ⌊ln(n/(N/2)) / ln(D/(N/2)) · (N − N/2)⌋)`, computed
/// in binary32 as the official code does (the ratio, its logarithm and the product are f32;
/// the constant ln(D/(N/2)) is rounded once to f32). spec: [t5.bucket.official.float]
pub fn bucket(query: u64, key: u64, num_buckets: usize, max_distance: u64) -> usize {
    let n = query.saturating_sub(key);
    let max_exact = (num_buckets / 2) as u64;
    if n < max_exact {
        return n as usize;
    }
    let ratio = n as f32 / max_exact as f32;
    let log = f64::from(ratio).ln() as f32;
    let span = (max_distance as f64 / max_exact as f64).ln() as f32;
    let scaled = (log / span) * (num_buckets as u64 - max_exact) as f32;
    (max_exact + scaled as u64).min(num_buckets as u64 - 1) as usize
}

/// T5 RPE.
#[derive(Debug, Clone)]
pub struct T5 {
    /// `relative_attention_bias.weight`, `[num_buckets, H]` (Hugging Face's name and layout).
    pub table: Tensor,
    /// N.
    pub num_buckets: usize,
    /// D.
    pub max_distance: u64,
}

impl T5 {
    /// A table initialised N(0, std²).
    pub fn new(
        num_buckets: usize,
        max_distance: u64,
        heads: usize,
        std: f64,
        path: &mut Path<'_>,
    ) -> Result<Self> {
        let table = path.pp("relative_attention_bias").param(
            "weight",
            &[num_buckets, heads],
            Init::Normal(std),
        )?;
        Ok(Self {
            table,
            num_buckets,
            max_distance,
        })
    }

    /// From an explicit table (`[num_buckets][H]`).
    pub fn from_params(table: &[Vec<f64>], max_distance: u64, device: &Device) -> Result<Self> {
        let heads = table.first().map_or(0, Vec::len);
        ensure(
            table.len() >= 2 && heads > 0 && table.iter().all(|r| r.len() == heads),
            || "T5 needs a rectangular table with >= 2 buckets and >= 1 head".into(),
        )?;
        ensure(max_distance > (table.len() / 2) as u64, || {
            "T5 needs max_distance > num_buckets / 2".into()
        })?;
        let flat: Vec<f32> = table.iter().flatten().map(|&v| v as f32).collect();
        Ok(Self {
            table: Tensor::from_vec(flat, (table.len(), heads), device)?,
            num_buckets: table.len(),
            max_distance,
        })
    }

    /// `[H, Q, K]`.
    pub fn bias_tensor(&self, grid: &Grid) -> Result<Tensor> {
        let (q, k) = grid.dims();
        let mut ids = Vec::with_capacity(q * k);
        for &i in &grid.queries {
            for &j in &grid.keys {
                ids.push(bucket(i, j, self.num_buckets, self.max_distance) as u32);
            }
        }
        let ids = Tensor::from_vec(ids, q * k, self.table.device())?;
        let heads = self.table.dims()[1];
        let rows = self.table.index_select(&ids, 0)?; // [Q·K, H]
        Ok(rows.t()?.reshape((heads, q, k))?)
    }

    /// Row-major `[H, Q, K]` at arbitrary positions.
    pub fn bias(&self, queries: &[u64], keys: &[u64]) -> Result<Vec<f32>> {
        let grid = Grid::new(queries, keys, self.table.device())?;
        Ok(self.bias_tensor(&grid)?.flatten_all()?.to_vec1()?)
    }
}

impl PositionEncoding for T5 {
    fn name(&self) -> &'static str {
        "t5"
    }
    fn biases(&self, grid: &Grid, layers: usize) -> Result<Vec<Option<Tensor>>> {
        let once = self.bias_tensor(grid)?;
        Ok(vec![Some(once); layers])
    }
    fn tile_bias(&self, layers: usize, capacity: usize) -> Result<Option<FusedEncoding>> {
        // The kernel's table is `[H, buckets]`; ours is `[buckets, H]`.
        let heads = self.table.dims()[1];
        let enc = DistanceEncoding::T5 {
            buckets: self.num_buckets,
            max_distance: self.max_distance as usize,
            table: values(&self.table.t()?)?,
        };
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
