//! Fast exact FIRE: piecewise-linear compilation of f_θ and fused attention with on-the-fly
//! bias.
//!
//! - [`compile`]: a ReLU MLP of one scalar compiled exactly to breakpoints and per-head affine
//!   pieces (eval/inference-time; see the module for when it is recompiled).
//! - [`fire`]: FIRE (and FIRE-S: the same source, one plan for every layer) as a tile bias
//!   source; [`baselines`]: NoPE, Alibi, Kerple, T5, Sandwich.
//! - [`attention`]: the fused, tiled, online-softmax causal kernel and the decoding step;
//!   [`backward`]: its backward pass for training, with the bias parameters' gradients
//!   ([`fire_grad`] for FIRE, [`table`] for any distance-only encoding).
//! - [`materialised`]: the slow, obvious twins (the full `[H, N, N]` bias, Appendix E style,
//!   and plain softmax attention) every fast path is tested against.
//! - [`bench`]: side-by-side measurements returning a table of ratios.

pub mod attention;
pub mod backward;
pub mod baselines;
pub mod bench;
pub mod compile;
pub mod device;
pub mod error;
pub mod fire;
pub mod fire_grad;
pub(crate) mod kernels;
pub mod materialised;
pub mod mlp;
pub mod table;
pub mod tile;

pub use attention::{attend, decode, fused_causal, fused_causal_lse, Shape};
pub use backward::{fused_causal_backward, GradPlan, Gradients};
pub use baselines::{alibi_slopes, DistanceBias, DistanceEncoding};
pub use compile::PiecewiseLinear;
pub use error::{Error, Result};
pub use fire::{FireBias, FireParams, Transform};
pub use mlp::{Activation, Linear, Mlp};
pub use table::DistanceTable;
pub use tile::{BiasPlan, Position, TileBias, MAX_POSITION};

#[cfg(test)]
mod tests;
