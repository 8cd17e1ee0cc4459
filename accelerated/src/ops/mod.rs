//! Fused CPU ops with backward passes: what a training step spends its time on outside the
//! matrix products, each done in one pass over memory instead of a chain of candle primitives
//! (each of which allocates its output and walks the tensor single-threaded).
//!
//! | op | replaces | saves |
//! |---|---|---|
//! | [`layer_norm`] | 9 primitives forward, ~25 backward | one pass each way, rows in parallel |
//! | [`bias_gelu`] | broadcast add, `gelu_erf`, and its 8-op derivative | one pass each way |
//! | [`cross_entropy`] | log-softmax, gather, mean and their backward | the `[N, V]` temporaries |
//! | [`block::block`] | the whole Transformer block when training with the fused attention | autograd's per-op allocations, accumulations and copies |
//!
//! Each is a candle custom op on f32 CPU tensors, with the composed candle version kept beside
//! it as its slow twin ([`crate::nn`]) and a parity test on values and gradients
//! (`tests/ops.rs`). Callers go through [`crate::nn`], which picks the fused op on the CPU and
//! the composed one elsewhere (CUDA, other dtypes), so behaviour is the same everywhere up to
//! float rounding.

pub mod block;
pub(crate) mod cross_entropy;
mod gelu;
pub(crate) mod layer_norm;
pub(crate) mod scratch;

pub use cross_entropy::cross_entropy;
pub use gelu::bias_gelu;
pub use layer_norm::layer_norm;

use std::sync::atomic::{AtomicBool, Ordering};

use candle_core::{CpuStorage, DType, Layout, Storage, Tensor};
use rayon::prelude::*;

/// Partial sums (or maxima) a row's reduction keeps in the LayerNorm and cross-entropy ops:
/// one AVX-512 vector. A single running sum is a chain of dependent adds that the compiler may
/// not reorder (no fast-math), so it ran one value per add at scalar speed; `LANES` independent
/// ones vectorise under the SIMD dispatch (perf: LayerNorm's sums and the loss were 7 % and
/// 3 % of a small training step before).
pub(crate) const LANES: usize = 16;

/// Set by [`use_composed`].
static COMPOSED: AtomicBool = AtomicBool::new(false);

/// With `true`, every caller in this crate takes the composed twins from now on (layer norm,
/// GeLU, cross-entropy, AdamW built afterwards, the linear layers' batched product): the code
/// as it was before the fused ops, so a benchmark can time both in one run and one process
/// (`examples/step_profile.rs`). Tests compare the ops directly and never flip it.
pub fn use_composed(on: bool) {
    COMPOSED.store(on, Ordering::Relaxed);
}

/// Whether [`use_composed`] is off (the fused ops are in use where [`fusable`]).
pub fn enabled() -> bool {
    !COMPOSED.load(Ordering::Relaxed)
}

/// Whether `t` can go through the fused CPU ops (f32 on the CPU, and [`enabled`]).
pub fn fusable(t: &Tensor) -> bool {
    enabled() && t.dtype() == DType::F32 && t.device().is_cpu()
}

/// The contiguous f32 slice a CPU storage holds under `l`.
pub(crate) fn slice<'a>(
    s: &'a CpuStorage,
    l: &Layout,
    what: &str,
) -> candle_core::Result<&'a [f32]> {
    let data = match s {
        CpuStorage::F32(v) => v.as_slice(),
        _ => candle_core::bail!("{what} must be f32"),
    };
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&data[a..b]),
        None => candle_core::bail!("{what} must be contiguous"),
    }
}

/// Runs `f` on the f32 values of a CPU tensor, without a copy when it is contiguous.
pub(crate) fn with_f32<R>(
    t: &Tensor,
    what: &str,
    f: impl FnOnce(&[f32]) -> candle_core::Result<R>,
) -> candle_core::Result<R> {
    if !t.is_contiguous() {
        return with_f32(&t.contiguous()?, what, f);
    }
    let (storage, layout) = t.storage_and_layout();
    match &*storage {
        Storage::Cpu(s) => f(slice(s, layout, what)?),
        _ => candle_core::bail!("{what} must be on the CPU"),
    }
}

/// Rows per parallel task for `row_len`-wide rows: about 16 K values, so rayon's per-task cost
/// stays small against the work.
pub(crate) fn rows_per_task(row_len: usize) -> usize {
    (16_384 / row_len.max(1)).max(1)
}

/// Sums per-task partial vectors of length `len` (the rows' contributions to a parameter's
/// gradient) in task order, so the result does not depend on the thread count.
pub(crate) fn sum_partials(partials: Vec<Vec<f32>>, len: usize) -> Vec<f32> {
    let mut total = vec![0f32; len];
    for p in partials {
        total.iter_mut().zip(&p).for_each(|(a, b)| *a += b);
    }
    total
}

/// `f(rows, out_rows)` over `x`'s rows of width `d` in parallel tasks, writing `out`
/// (same length as `x`).
pub(crate) fn map_rows(
    x: &[f32],
    d: usize,
    out: &mut [f32],
    f: impl Fn(&[f32], &mut [f32]) + Sync + Send,
) {
    let chunk = rows_per_task(d) * d;
    out.par_chunks_mut(chunk)
        .zip(x.par_chunks(chunk))
        .for_each(|(o, x)| f(x, o));
}
