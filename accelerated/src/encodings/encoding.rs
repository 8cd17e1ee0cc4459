//! The pluggable positional encoding of the decoder, and the encoding that does nothing.

use candle_core::{Device, Tensor};

use crate::encodings::additive::{AdditiveModule, KernelBias, LayerBias};
use crate::encodings::grid::Grid;
use crate::error::Result;

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

    /// The distinct modules of an additive encoding, in layer order (one per layer, or one
    /// shared by all); empty otherwise. For plots and parameter export.
    fn modules(&self) -> Vec<&dyn AdditiveModule> {
        Vec::new()
    }

    /// The encoding as the fused kernels' bias sources, compiled from the current weights with
    /// tables for distances below `capacity`; `None` when it is not additive (RoPE, RoPE-PI),
    /// which keeps the candle path.
    fn tile_bias(&self, layers: usize, capacity: usize) -> Result<Option<KernelBias>> {
        let _ = (layers, capacity);
        Ok(None)
    }

    /// Every layer's bias for the fused training op at positions `0..n`, as differentiable
    /// tensors; `None` when the encoding is not additive (RoPE, RoPE-PI), which trains on the
    /// candle path only.
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
    fn tile_bias(&self, layers: usize, _capacity: usize) -> Result<Option<KernelBias>> {
        Ok(Some(KernelBias::none(layers)))
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
