//! Where an encoding is evaluated: the (query, key) position pairs of one call, and how a
//! module's tensors reach the kernels' plain numbers.

use candle_core::{Device, Tensor};
use fire_vocabulary::MAX_POSITION;

use crate::error::{ensure, Error, Result};

/// The (query, key) position pairs one attention call covers.
///
/// Positions are 0-based integers (spec: [conv.positions]); the distance `|i − j|` is formed
/// exactly on the host (in f64, then rounded once to f32), so arbitrary position lists — KV-cache
/// rows, randomised positions — are ordinary inputs.
#[derive(Debug, Clone)]
pub struct Grid {
    /// Query positions (rows).
    pub queries: Vec<u64>,
    /// Key positions (columns).
    pub keys: Vec<u64>,
    /// `|i − j|`, `[Q, K]`, f32.
    pub distance: Tensor,
    /// The query positions `i`, `[Q]`, f32.
    pub query: Tensor,
}

impl Grid {
    /// The grid of two arbitrary position lists.
    pub fn new(queries: &[u64], keys: &[u64], device: &Device) -> Result<Self> {
        ensure(!queries.is_empty() && !keys.is_empty(), || {
            "query and key position lists must be non-empty".into()
        })?;
        let max = queries.iter().chain(keys).copied().max().unwrap_or(0);
        ensure(max <= MAX_POSITION, || {
            format!("position {max} is not exactly representable")
        })?;
        let mut distance = Vec::with_capacity(queries.len() * keys.len());
        for &i in queries {
            for &j in keys {
                distance.push(i.abs_diff(j) as f32);
            }
        }
        let query: Vec<f32> = queries.iter().map(|&i| i as f32).collect();
        Ok(Self {
            queries: queries.to_vec(),
            keys: keys.to_vec(),
            distance: Tensor::from_vec(distance, (queries.len(), keys.len()), device)?,
            query: Tensor::from_vec(query, queries.len(), device)?,
        })
    }

    /// Queries `start..start+len` against keys `0..start+len`: one causal chunk.
    pub fn causal(start: u64, len: u64, device: &Device) -> Result<Self> {
        let queries: Vec<u64> = (start..start + len).collect();
        let keys: Vec<u64> = (0..start + len).collect();
        Self::new(&queries, &keys, device)
    }

    /// `[Q, K]`.
    pub fn dims(&self) -> (usize, usize) {
        (self.queries.len(), self.keys.len())
    }
}

/// A tensor's values in f64, row-major: how a module's current weights reach the kernels'
/// plain numbers.
pub(crate) fn values(t: &Tensor) -> Result<Vec<f64>> {
    Ok(t.to_dtype(candle_core::DType::F64)?
        .flatten_all()?
        .to_vec1()?)
}

/// A scalar tensor's value in f64.
pub(crate) fn scalar(t: &Tensor) -> Result<f64> {
    values(t)?
        .first()
        .copied()
        .ok_or_else(|| Error::Config("empty scalar parameter".into()))
}
