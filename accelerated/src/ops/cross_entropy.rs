//! Mean softmax cross-entropy as one op: `loss = mean_r (lse(x_r) − x_r[t_r])`.
//!
//! Backward: `dx_r = g/N · (softmax(x_r) − onehot(t_r))`, one pass per row that recomputes
//! the row's log-sum-exp. The composed form ([`crate::nn::cross_entropy_composed`]) builds the
//! `[N, V]` log-probabilities and, backward, half a dozen more `[N, V]` tensors.

use std::sync::Arc;

use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor};
use fire_kernels::simd::{self, exp_nonpositive, Kernel, Madd};
use rayon::prelude::*;

use super::{map_rows, rows_per_task, slice, with_f32, LANES};

#[derive(Debug)]
struct CrossEntropy;

/// Mean negative log-likelihood of `targets` (`[N]`, u32) under `logits` (`[N, V]`, f32 on the
/// CPU), a scalar differentiable with respect to the logits.
pub fn cross_entropy(logits: &Tensor, targets: &Tensor) -> candle_core::Result<Tensor> {
    logits
        .contiguous()?
        .apply_op2_arc(&targets.contiguous()?, Arc::new(Box::new(CrossEntropy)))
}

/// The row's `(max, ln Σ exp(x − max))`, the exponentials by
/// [`exp_nonpositive`] (`x − max ≤ 0`; within 4·10⁻⁷ relative of `f32::exp`).
#[inline(always)]
fn lse<M: Madd>(x: &[f32]) -> (f32, f32) {
    let chunks = x.chunks_exact(LANES);
    let mut mx = [f32::NEG_INFINITY; LANES];
    for c in chunks.clone() {
        for (m, &v) in mx.iter_mut().zip(c) {
            *m = m.max(v);
        }
    }
    let m = chunks.remainder().iter().fold(
        mx.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)),
        |a, &b| a.max(b),
    );
    let mut acc = [0f32; LANES];
    for c in chunks.clone() {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += exp_nonpositive::<M>(v - m);
        }
    }
    let tail: f32 = chunks
        .remainder()
        .iter()
        .map(|&v| exp_nonpositive::<M>(v - m))
        .sum();
    (m, (acc.iter().sum::<f32>() + tail).ln())
}

/// Σ over rows of `lse(x_r) − x_r[t_r]`, in f64, under the SIMD dispatch.
struct Losses<'a> {
    x: &'a [f32],
    t: &'a [u32],
    v: usize,
}

impl Kernel for Losses<'_> {
    type Output = f64;
    #[inline(always)]
    fn run<M: Madd>(self) -> f64 {
        let mut total = 0f64;
        for (row, &t) in self.x.chunks_exact(self.v).zip(self.t) {
            let (m, l) = lse::<M>(row);
            total += f64::from(m + l - row[t as usize]);
        }
        total
    }
}

/// `dx_r = scale · softmax(x_r)` for each row, under the SIMD dispatch (the one-hot part is
/// subtracted by the caller).
struct Softmaxes<'a> {
    x: &'a [f32],
    dx: &'a mut [f32],
    v: usize,
    scale: f32,
}

impl Kernel for Softmaxes<'_> {
    type Output = ();
    #[inline(always)]
    fn run<M: Madd>(self) {
        let Softmaxes { x, dx, v, scale } = self;
        for (x, dx) in x.chunks_exact(v).zip(dx.chunks_exact_mut(v)) {
            let (m, l) = lse::<M>(x);
            let shift = m + l;
            for (d, &x) in dx.iter_mut().zip(x) {
                *d = scale * exp_nonpositive::<M>(x - shift);
            }
        }
    }
}

fn targets_of<'a>(s: &'a CpuStorage, l: &Layout) -> candle_core::Result<&'a [u32]> {
    let data = match s {
        CpuStorage::U32(v) => v.as_slice(),
        _ => candle_core::bail!("cross entropy: targets must be u32"),
    };
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&data[a..b]),
        None => candle_core::bail!("cross entropy: targets must be contiguous"),
    }
}

fn check(x: usize, v: usize, t: &[u32]) -> candle_core::Result<()> {
    if v == 0 || t.is_empty() || x != t.len() * v {
        candle_core::bail!("cross entropy: {x} logits for {} targets", t.len());
    }
    if let Some(bad) = t.iter().find(|&&t| t as usize >= v) {
        candle_core::bail!("cross entropy: target {bad} outside the vocabulary of {v}");
    }
    Ok(())
}

/// The mean of `lse(x_r) − x_r[t_r]` over the rows of `x` (`[t.len(), v]`), summed in f64.
pub(crate) fn mean_loss(x: &[f32], t: &[u32], v: usize) -> candle_core::Result<f32> {
    check(x.len(), v, t)?;
    let chunk = rows_per_task(v);
    let total: f64 = x
        .par_chunks(chunk * v)
        .zip(t.par_chunks(chunk))
        .map(|(x, t)| simd::dispatch(Losses { x, t, v }))
        .collect::<Vec<_>>()
        .into_iter()
        .sum();
    Ok((total / t.len() as f64) as f32)
}

/// `scale · (softmax(x_r) − onehot(t_r))` for every row of `x`: the gradient of the loss
/// times `scale·N`.
pub(crate) fn gradient(
    x: &[f32],
    t: &[u32],
    v: usize,
    scale: f32,
) -> candle_core::Result<Vec<f32>> {
    let mut dx = vec![0f32; x.len()];
    gradient_into(x, t, v, scale, &mut dx)?;
    Ok(dx)
}

/// [`gradient`] into `dx` (of `x`'s length), every value of which it writes.
pub(crate) fn gradient_into(
    x: &[f32],
    t: &[u32],
    v: usize,
    scale: f32,
    dx: &mut [f32],
) -> candle_core::Result<()> {
    check(x.len(), v, t)?;
    if dx.len() != x.len() {
        candle_core::bail!(
            "cross entropy: {} gradients for {} logits",
            dx.len(),
            x.len()
        );
    }
    map_rows(x, v, dx, |x, dx| {
        simd::dispatch(Softmaxes { x, dx, v, scale })
    });
    // The one-hot part.
    for (r, &t) in t.iter().enumerate() {
        dx[r * v + t as usize] -= scale;
    }
    Ok(())
}

impl CustomOp2 for CrossEntropy {
    fn name(&self) -> &'static str {
        "fused-cross-entropy"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = slice(s1, l1, "cross entropy: logits")?;
        let t = targets_of(s2, l2)?;
        let (_, v) = l1.shape().dims2()?;
        let loss = mean_loss(x, t, v)?;
        Ok((CpuStorage::F32(vec![loss]), Shape::from(())))
    }

    fn bwd(
        &self,
        logits: &Tensor,
        targets: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let g: f32 = grad.to_dtype(candle_core::DType::F32)?.to_scalar()?;
        let t: Vec<u32> = targets.flatten_all()?.to_vec1()?;
        let (_, v) = logits.dims2()?;
        let scale = g / t.len() as f32;
        let dx = with_f32(logits, "cross entropy: logits", |x| {
            gradient(x, &t, v, scale)
        })?;
        Ok((
            Some(Tensor::from_vec(dx, logits.shape(), logits.device())?),
            None,
        ))
    }
}
