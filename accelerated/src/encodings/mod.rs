//! Positional encodings: a pluggable trait and one module per encoding, named as the papers
//! name them.
//!
//! An encoding either adds a per-head bias `[H, Q, K]` to the attention logits (FIRE, FIRE-S,
//! Alibi, Kerple, T5, Sandwich), rotates queries and keys (RoPE, RoPE-PI), or does nothing
//! (NoPE). The model asks once per forward pass (per query chunk) for every layer's bias, so a
//! shared encoding (FIRE-S, T5, Alibi) computes its bias once and hands the same tensor to
//! every layer.

pub mod alibi;
pub mod fire;
pub mod kerple;
pub mod rope;
pub mod sandwich;
pub mod t5;

use candle_core::{Device, Tensor};

use crate::config::{EncodingConfig, ModelConfig};
use crate::error::{ensure, Result};
use crate::fused::FusedEncoding;
use crate::fused_op::LayerBias;
use crate::params::Path;

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
        ensure(max <= 1 << 53, || {
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

/// A positional encoding of a decoder-only Transformer.
pub trait PositionEncoding: std::fmt::Debug {
    /// The encoding's name (`fire`, `rope`, …).
    fn name(&self) -> &'static str;

    /// The additive bias of every layer, `[H, Q, K]` each, or `None` for a layer without one.
    /// Values for keys after the query are whatever the encoding's clause says; the model masks
    /// them. spec: [attn.logits]
    fn biases(&self, grid: &Grid, layers: usize) -> Result<Vec<Option<Tensor>>>;

    /// Rotates queries or keys `[B, H, T, d]` at `positions` (`[T]`); identity unless rotary.
    fn rotate(&self, x: &Tensor, positions: &[u64]) -> Result<Tensor> {
        let _ = positions;
        Ok(x.clone())
    }

    /// The FIRE modules, one per layer (FIRE) or one in total (FIRE-S); empty otherwise.
    fn fire_modules(&self) -> Vec<&fire::Fire> {
        Vec::new()
    }

    /// The encoding as the fused kernel's bias sources, compiled from the current weights with
    /// tables for distances below `capacity`; `None` when it is not additive (RoPE, RoPE-PI),
    /// which keeps the materialised path. See [`crate::fused`].
    fn tile_bias(&self, layers: usize, capacity: usize) -> Result<Option<FusedEncoding>> {
        let _ = (layers, capacity);
        Ok(None)
    }

    /// Every layer's bias for the fused training op ([`crate::fused_op`]) at positions
    /// `0..n`, as differentiable tensors; `None` when the encoding is not additive (RoPE,
    /// RoPE-PI), which trains on the materialised path only.
    fn train_bias(
        &self,
        layers: usize,
        n: usize,
        device: &Device,
    ) -> Result<Option<Vec<LayerBias>>> {
        let _ = (layers, n, device);
        Ok(None)
    }
}

/// The bias of a distance-only encoding as one differentiable table per layer, `[H, n]` with
/// entry `[h, m]` the bias at distance `m`: the encoding's own bias for the query `n − 1`
/// against the keys `n − 1, n − 2, …, 0` (O(n·H), autograd intact). Layers that share a tensor
/// share the table.
pub fn distance_tables(
    encoding: &dyn PositionEncoding,
    layers: usize,
    n: usize,
    device: &Device,
) -> Result<Option<Vec<LayerBias>>> {
    ensure(n > 0, || "empty sequence".into())?;
    let last = n as u64 - 1;
    let keys: Vec<u64> = (0..=last).rev().collect();
    let grid = Grid::new(&[last], &keys, device)?;
    let tables = encoding
        .biases(&grid, layers)?
        .into_iter()
        .map(|b| -> Result<LayerBias> {
            Ok(match b {
                None => LayerBias::None,
                Some(t) => {
                    let h = t.dims()[0];
                    LayerBias::Table {
                        table: t.reshape((h, n))?,
                    }
                }
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Some(tables))
}

/// No positional information at all: causal masking alone breaks the symmetry.
#[derive(Debug, Clone, Copy, Default)]
pub struct Nope;

impl PositionEncoding for Nope {
    fn name(&self) -> &'static str {
        "nope"
    }
    fn biases(&self, _grid: &Grid, layers: usize) -> Result<Vec<Option<Tensor>>> {
        Ok(vec![None; layers])
    }
    fn tile_bias(&self, layers: usize, _capacity: usize) -> Result<Option<FusedEncoding>> {
        Ok(Some(FusedEncoding::none(layers)))
    }
    fn train_bias(
        &self,
        layers: usize,
        _n: usize,
        _device: &Device,
    ) -> Result<Option<Vec<LayerBias>>> {
        Ok(Some(vec![LayerBias::None; layers]))
    }
}

/// Builds the encoding of `cfg`, registering its parameters under `root`.
pub fn build(cfg: &ModelConfig, root: &mut Path<'_>) -> Result<Box<dyn PositionEncoding>> {
    let heads = cfg.n_heads;
    let layers = cfg.n_layers;
    Ok(match &cfg.encoding {
        EncodingConfig::Fire(f) => {
            let modules = (0..layers)
                .map(|l| fire::Fire::new(f, heads, &mut root.pp(format!("layers.{l}.attn.fire"))))
                .collect::<Result<Vec<_>>>()?;
            Box::new(fire::PerLayer { modules })
        }
        EncodingConfig::FireS(f) => Box::new(fire::Shared {
            module: fire::Fire::new(f, heads, &mut root.pp("fire"))?,
        }),
        EncodingConfig::Nope => Box::new(Nope),
        EncodingConfig::Rope { theta } => Box::new(rope::Rope::new(*theta, 1.0, cfg.head_dim())?),
        EncodingConfig::RopePi { theta, scale } => {
            Box::new(rope::Rope::new(*theta, *scale, cfg.head_dim())?)
        }
        EncodingConfig::Alibi => Box::new(alibi::Alibi::new(heads, &root.device())?),
        EncodingConfig::KerpleLog | EncodingConfig::KerplePower => {
            let form = if matches!(cfg.encoding, EncodingConfig::KerpleLog) {
                kerple::Form::Log
            } else {
                kerple::Form::Power
            };
            let modules = (0..layers)
                .map(|l| {
                    kerple::Kerple::new(
                        form,
                        heads,
                        &mut root.pp(format!("layers.{l}.attn.kerple")),
                    )
                })
                .collect::<Result<Vec<_>>>()?;
            Box::new(kerple::PerLayer { modules })
        }
        EncodingConfig::T5 {
            num_buckets,
            max_distance,
        } => Box::new(t5::T5::new(
            *num_buckets,
            *max_distance,
            heads,
            cfg.init_std,
            &mut root.pp("rel_pos"),
        )?),
        EncodingConfig::Sandwich => Box::new(sandwich::Sandwich::new(
            heads,
            cfg.head_dim(),
            &root.device(),
        )?),
    })
}
