//! Additive encodings (FIRE, FIRE-S, Alibi, Kerple, T5, Sandwich): modules that each add a
//! per-head bias to the logits (arranged over the layers by [`super::Additive`]).
//!
//! Each attention backend asks an encoding for the bias in its own form:
//! - candle: `[H, Q, K]` tensors on a grid ([`AdditiveModule::bias_tensor`]);
//! - the fused evaluation and CUDA kernels: the module compiled from its current weights into a
//!   bias source of the kernels ([`AdditiveModule::source`], gathered in a [`KernelBias`]);
//! - the fused training op: the bias parameters as differentiable tensors ([`LayerBias`]).
//!
//! A module supplies its bias tensor and its kernel source; everything else — the conformance
//! entry point [`AdditiveModule::bias`], every layer's bias for each backend, and for a
//! distance-only module its training table — is written once here. spec: [attn.logits],
//! [fire.shared], [fire.per-layer]

use candle_core::{DType, Device, Tensor};
use fire_kernels::{DeviceTables, PackedFire};

use crate::encodings::grid::Grid;
use crate::error::{ensure, Error, Result};

/// One module of an additive encoding.
pub trait AdditiveModule: std::fmt::Debug {
    /// `H`.
    fn heads(&self) -> usize;

    /// The device of the module's parameters.
    fn device(&self) -> &Device;

    /// The bias of every pair of `grid`, `[H, Q, K]`, differentiable with respect to the
    /// module's parameters; keys after the query get the encoding's own value
    /// (spec: [conv.future]).
    fn bias_tensor(&self, grid: &Grid) -> Result<Tensor>;

    /// The module compiled for the kernels from its current values, with tables for distances
    /// below `capacity` (longer distances still work, on a slower path).
    fn source(&self, capacity: usize) -> Result<Box<dyn DeviceTables>>;

    /// The module's bias for the fused training op at positions `0..n`, differentiable.
    ///
    /// The default serves every distance-only module: the table `[H, n]` whose entry `[h, m]`
    /// is the bias at distance `m`, read off [`Self::bias_tensor`] for the query `n − 1`
    /// against the keys `n − 1, n − 2, …, 0` (O(n·H), autograd intact, no hand-written
    /// derivative). spec: [grad.vjp]
    fn train_bias(&self, n: usize) -> Result<LayerBias> {
        ensure(n > 0, || "empty sequence".into())?;
        let last = n as u64 - 1;
        let keys: Vec<u64> = (0..=last).rev().collect();
        let grid = Grid::new(&[last], &keys, self.device())?;
        let bias = self.bias_tensor(&grid)?;
        let heads = bias.dims()[0];
        Ok(LayerBias::Table {
            table: bias.reshape((heads, n))?,
        })
    }

    /// The bias at two arbitrary position lists, row-major `[H, Q, K]` in f32: the
    /// conformance harness's entry point.
    fn bias(&self, queries: &[u64], keys: &[u64]) -> Result<Vec<f32>> {
        let grid = Grid::new(queries, keys, self.device())?;
        Ok(self
            .bias_tensor(&grid)?
            .to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1()?)
    }

    /// The module's parameters as a PyTorch-style state dict (names relative to the module);
    /// empty where there is no export.
    fn state_dict(&self) -> Vec<(String, Tensor)> {
        Vec::new()
    }
}

/// An encoding compiled for the fused kernels: a few bias sources and, per layer, which one it
/// uses (`None`: no bias, the NoPE fast path). A shared source is planned (or tabulated for a
/// device) once per call and its plan handed to every layer.
#[derive(Debug)]
pub struct KernelBias {
    sources: Vec<Box<dyn DeviceTables>>,
    layers: Vec<Option<usize>>,
}

impl KernelBias {
    /// `layers[l]` indexes `sources` (or is `None` for a layer without bias).
    pub fn new(sources: Vec<Box<dyn DeviceTables>>, layers: Vec<Option<usize>>) -> Result<Self> {
        if let Some(bad) = layers.iter().flatten().find(|&&s| s >= sources.len()) {
            return Err(Error::Config(format!(
                "kernel bias: layer refers to source {bad} of {}",
                sources.len()
            )));
        }
        Ok(Self { sources, layers })
    }

    /// No bias in any of `layers` layers (NoPE).
    pub fn none(layers: usize) -> Self {
        Self {
            sources: Vec::new(),
            layers: vec![None; layers],
        }
    }

    /// The distinct sources.
    pub fn sources(&self) -> &[Box<dyn DeviceTables>] {
        &self.sources
    }

    /// Which source layer `l` uses (`None`: no bias).
    pub fn layer(&self, l: usize) -> Option<usize> {
        self.layers.get(l).copied().flatten()
    }

    /// The number of layers.
    pub fn layers(&self) -> usize {
        self.layers.len()
    }
}

/// One layer's bias for the fused training op, as differentiable tensors: the op's gradient
/// for them flows back through autograd to the encoding's variables.
#[derive(Debug, Clone)]
pub enum LayerBias {
    /// No bias (NoPE).
    None,
    /// FIRE: `params` holds θ, `c`, `m` packed ([`PackedFire::packed_len`] values).
    Fire {
        /// The module's structure.
        layout: PackedFire,
        /// The packed, differentiable parameters.
        params: Tensor,
    },
    /// A distance-only encoding: `table: [H, N]`, `table[h, n] = b_h` at distance `n`.
    Table {
        /// The differentiable table.
        table: Tensor,
    },
}
