//! T5's relative position bias with the official log-binned buckets (mesh-tensorflow
//! `_relative_position_bucket`, unidirectional): one learned scalar per (bucket, head), the
//! table shared by all layers. Keys after the query fall in bucket 0 (n = max(i − j, 0)).

use candle_core::{Device, Tensor};
use fire_kernels::{t5_bucket, DeviceTables, DistanceBias, DistanceEncoding};

use crate::encodings::additive::AdditiveModule;
use crate::encodings::grid::{values, Grid};
use crate::error::{ensure, Result};
use crate::params::{Init, Path};

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
}

impl AdditiveModule for T5 {
    fn heads(&self) -> usize {
        self.table.dims()[1]
    }

    fn device(&self) -> &Device {
        self.table.device()
    }

    /// One bucket per pair ([`t5_bucket`] of `max(i − j, 0)`), then the table's row.
    fn bias_tensor(&self, grid: &Grid) -> Result<Tensor> {
        let (q, k) = grid.dims();
        let mut ids = Vec::with_capacity(q * k);
        for &i in &grid.queries {
            for &j in &grid.keys {
                let n = i.saturating_sub(j);
                ids.push(t5_bucket(n, self.num_buckets, self.max_distance) as u32);
            }
        }
        let ids = Tensor::from_vec(ids, q * k, self.table.device())?;
        let rows = self.table.index_select(&ids, 0)?; // [Q·K, H]
        Ok(rows.t()?.reshape((self.heads(), q, k))?)
    }

    fn source(&self, capacity: usize) -> Result<Box<dyn DeviceTables>> {
        // The kernels' table is `[H, buckets]`; ours is `[buckets, H]`.
        let enc = DistanceEncoding::T5 {
            buckets: self.num_buckets,
            max_distance: self.max_distance,
            table: values(&self.table.t()?)?,
        };
        Ok(Box::new(DistanceBias::new(enc, self.heads(), capacity)?))
    }
}
