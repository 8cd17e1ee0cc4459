//! # fire-kernels
//!
//! Fast exact FIRE on plain `f32`/`f64` slices, with no tensor library: the layer the candle
//! model (`fire-accelerated`) and the conformance harness's `--builtin fast` both stand on.
//!
//! A ReLU MLP of one scalar is piecewise linear, so f_θ compiles exactly to breakpoints and
//! per-head affine pieces, and FIRE's bias can be computed tile by tile inside a tiled,
//! online-softmax attention at almost no cost over no bias at all; an `[H, N, N]` tensor never
//! exists, forward or backward.
//!
//! Layers, bottom up (each uses only those above it):
//! - [`error`]: the one error type; [`mlp`]: f_θ as plain numbers; [`compile`]: f_θ compiled
//!   exactly to a [`PiecewiseLinear`].
//! - [`tile`]: the bias-source abstraction ([`TileBias`] builds a [`BiasPlan`] that fills one
//!   tile of one head at a time) and the position checks.
//! - [`fire`]: FIRE (and FIRE-S: one plan shared by every layer) as a tile source;
//!   [`baselines`]: NoPE, Alibi, Kerple, T5, Sandwich, tabulated per distance; [`table`]: any
//!   distance-only bias given as a table, for training.
//! - [`simd`]: safe runtime dispatch of the hot loops (AVX2 + FMA, AVX-512, NEON), whose
//!   vector operands `aligned` keeps on cache lines; [`gemm`]:
//!   matrix products on slices, one band of the output per thread (the crate's one module
//!   with `unsafe`: the bounds-checked `gemm` call and the bands' disjoint writes).
//! - [`attention`]: the fused causal kernel and the decoding step; [`backward`]: its backward
//!   pass, with the bias parameters' gradients ([`fire_grad`] for FIRE, [`table`] otherwise).
//! - [`device`]: the bias as flat tables for a device kernel, that kernel's algorithm in Rust,
//!   and its CUDA source ([`device::CUDA_SOURCE`]); the tile layer knows nothing of it.
//! - [`materialised`]: the slow, obvious twins every fast path is tested against; [`bench`](mod@bench):
//!   side-by-side measurements returning a table of ratios.

mod aligned;
pub mod attention;
pub mod backward;
pub mod baselines;
pub mod bench;
pub mod compile;
pub mod device;
pub mod error;
pub mod fire;
pub mod fire_grad;
pub mod gemm;
mod inner;
pub mod materialised;
pub mod mlp;
pub mod simd;
pub mod table;
pub mod tile;
mod wide;

pub use attention::{
    attend, decode, fused_causal, fused_causal_lse, fused_causal_lse_batch, Shape,
};
pub use backward::{
    fused_causal_backward, fused_causal_backward_into_rows, BackwardInputs, GradPlan, Gradients,
    MergedRows,
};
pub use baselines::{alibi_slopes, t5_bucket, DistanceBias, DistanceEncoding};
pub use compile::PiecewiseLinear;
pub use device::{DeviceBias, DeviceTables};
pub use error::{Error, Result};
pub use fire::{FireBias, FireParams, PackedFire};
pub use fire_vocabulary::{Activation, Position, Threshold, Transform, MAX_POSITION};
pub use mlp::{Linear, Mlp};
pub use table::DistanceTable;
pub use tile::{BiasPlan, TileBias};

#[cfg(test)]
mod tests;
