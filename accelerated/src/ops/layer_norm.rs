//! Layer normalisation over the last dimension as one op: `y = (x − μ)·r·γ + β` with
//! `r = 1/√(σ² + ε)` (biased variance, as PyTorch's `LayerNorm`).
//!
//! Backward, per row with `x̂ = (x − μ)·r` and `g = dy ⊙ γ`:
//! `dx = r·(g − mean(g) − x̂·mean(g ⊙ x̂))`, `dγ = Σ_rows dy ⊙ x̂`, `dβ = Σ_rows dy`.
//! The row statistics are recomputed from `x` (one pass; nothing is kept between the passes).

use std::sync::Arc;

use candle_core::{CpuStorage, CustomOp3, Layout, Shape, Tensor};
use fire_kernels::simd::{self, Kernel, Madd};
use rayon::prelude::*;

use super::scratch::Scratch;
use super::{map_rows, rows_per_task, slice, sum_partials, with_f32, LANES};

#[derive(Debug)]
struct LayerNorm {
    eps: f32,
}

/// `Σ f(a[i], b[i], c[i])` over equal-length slices, in `LANES` interleaved partial sums
/// added at the end (chunks, not indices, so no bounds checks stand in the way).
#[inline(always)]
fn lane_sum(a: &[f32], b: &[f32], c: &[f32], f: impl Fn(f32, f32, f32) -> f32) -> f32 {
    let mut acc = [0f32; LANES];
    let (ca, cb, cc) = (
        a.chunks_exact(LANES),
        b.chunks_exact(LANES),
        c.chunks_exact(LANES),
    );
    let tail: f32 = (ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .zip(cc.remainder()))
    .map(|((&a, &b), &c)| f(a, b, c))
    .sum();
    for ((a, b), c) in ca.zip(cb).zip(cc) {
        for l in 0..LANES {
            acc[l] += f(a[l], b[l], c[l]);
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `(μ, r)` of one row.
#[inline(always)]
fn stats(x: &[f32], eps: f32) -> (f32, f32) {
    let inv_d = 1.0 / x.len() as f32;
    let mean = lane_sum(x, x, x, |x, _, _| x) * inv_d;
    let var = lane_sum(x, x, x, |x, _, _| (x - mean) * (x - mean)) * inv_d;
    (mean, 1.0 / (var + eps).sqrt())
}

/// `x: [.., d]`, `weight, bias: [d]`, all f32 on the CPU; differentiable in all three.
pub fn layer_norm(
    x: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
    eps: f64,
) -> candle_core::Result<Tensor> {
    let op = LayerNorm { eps: eps as f32 };
    x.contiguous()?.apply_op3_arc(
        &weight.contiguous()?,
        &bias.contiguous()?,
        Arc::new(Box::new(op)),
    )
}

impl CustomOp3 for LayerNorm {
    fn name(&self) -> &'static str {
        "fused-layer-norm"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = slice(s1, l1, "layer norm: x")?;
        let w = slice(s2, l2, "layer norm: weight")?;
        let b = slice(s3, l3, "layer norm: bias")?;
        let d = l1.shape().dims().last().copied().unwrap_or(0);
        if d == 0 || w.len() != d || b.len() != d {
            candle_core::bail!(
                "layer norm: x {:?}, weight {}, bias {}",
                l1.shape(),
                w.len(),
                b.len()
            );
        }
        let mut out = vec![0f32; x.len()];
        forward(x, w, b, self.eps, &mut out);
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        weight: &Tensor,
        _bias: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let d = weight.elem_count();
        let eps = self.eps;
        let (dx, dw, db) = with_f32(x, "layer norm: x", |x| {
            with_f32(weight, "layer norm: weight", |w| {
                with_f32(grad, "layer norm: gradient", |dy| {
                    backward(x, w, dy, d, eps)
                })
            })
        })?;
        let dev = x.device();
        Ok((
            Some(Tensor::from_vec(dx, x.shape(), dev)?),
            Some(Tensor::from_vec(dw, weight.shape(), dev)?),
            Some(Tensor::from_vec(db, weight.shape(), dev)?),
        ))
    }
}

/// `out = (x − μ)·r·γ + β` row by row (`x` and `out` of equal length, a multiple of
/// `w.len() = b.len()`), rows in parallel.
pub(crate) fn forward(x: &[f32], w: &[f32], b: &[f32], eps: f32, out: &mut [f32]) {
    /// One task's rows, under the SIMD dispatch (a closure body would be compiled for the
    /// baseline target; see [`simd::Kernel`]).
    struct Rows<'a> {
        x: &'a [f32],
        out: &'a mut [f32],
        w: &'a [f32],
        b: &'a [f32],
        eps: f32,
    }
    impl Kernel for Rows<'_> {
        type Output = ();
        #[inline(always)]
        fn run<M: Madd>(self) {
            let Rows { x, out, w, b, eps } = self;
            let d = w.len();
            for (x, o) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
                let (mean, r) = stats(x, eps);
                for (((o, &x), &w), &b) in o.iter_mut().zip(x).zip(w).zip(b) {
                    *o = (x - mean) * r * w + b;
                }
            }
        }
    }
    map_rows(x, w.len(), out, |x, out| {
        simd::dispatch(Rows { x, out, w, b, eps })
    });
}

/// `(dx, dγ, dβ)`.
pub(crate) fn backward(
    x: &[f32],
    w: &[f32],
    dy: &[f32],
    d: usize,
    eps: f32,
) -> candle_core::Result<(Vec<f32>, Vec<f32>, Vec<f32>)> {
    let (dx, dw, db) = backward_plus(x, w, dy, None, d, eps)?;
    Ok((dx.into_vec(), dw, db))
}

/// [`backward`] with `plus` (of `x`'s length) added to `dx` in the same pass: the residual
/// stream's own gradient, where the LayerNorm's input also goes round it (the fused block's
/// `x₁`, `x`). A separate pass over the sum was serial.
pub(crate) fn backward_plus(
    x: &[f32],
    w: &[f32],
    dy: &[f32],
    plus: Option<&[f32]>,
    d: usize,
    eps: f32,
) -> candle_core::Result<(Scratch, Vec<f32>, Vec<f32>)> {
    if plus.is_some_and(|p| p.len() != x.len()) {
        candle_core::bail!("layer norm: residual gradient of another length than x");
    }
    if dy.len() != x.len() {
        candle_core::bail!("layer norm: gradient {} for {} values", dy.len(), x.len());
    }
    // Every row of `dx` is written by the pass below.
    let mut dx = Scratch::overwritten(x.len());
    let chunk = rows_per_task(d) * d;
    let partials: Vec<(Vec<f32>, Vec<f32>)> = dx
        .par_chunks_mut(chunk)
        .enumerate()
        .zip(x.par_chunks(chunk).zip(dy.par_chunks(chunk)))
        .map(|((i, dx), (x, dy))| {
            let (mut dw, mut db) = (vec![0f32; d], vec![0f32; d]);
            let plus = plus.map(|p| &p[i * chunk..i * chunk + dx.len()]);
            simd::dispatch(BackwardRows {
                dx,
                x,
                dy,
                plus,
                w,
                dw: &mut dw,
                db: &mut db,
                eps,
            });
            (dw, db)
        })
        .collect();
    let (dws, dbs): (Vec<_>, Vec<_>) = partials.into_iter().unzip();
    Ok((dx, sum_partials(dws, d), sum_partials(dbs, d)))
}

/// One task's rows of the backward pass, under the SIMD dispatch: `dx` per row, `dγ` and `dβ`
/// summed over the rows into `dw` and `db`.
struct BackwardRows<'a> {
    dx: &'a mut [f32],
    x: &'a [f32],
    dy: &'a [f32],
    /// Added to `dx`.
    plus: Option<&'a [f32]>,
    w: &'a [f32],
    dw: &'a mut [f32],
    db: &'a mut [f32],
    eps: f32,
}

impl Kernel for BackwardRows<'_> {
    type Output = ();
    #[inline(always)]
    fn run<M: Madd>(self) {
        let BackwardRows {
            dx,
            x,
            dy,
            plus,
            w,
            dw,
            db,
            eps,
        } = self;
        let d = w.len();
        let inv_d = 1.0 / d as f32;
        for ((dx, x), dy) in dx
            .chunks_exact_mut(d)
            .zip(x.chunks_exact(d))
            .zip(dy.chunks_exact(d))
        {
            let (mean, r) = stats(x, eps);
            let sg = lane_sum(dy, w, x, |dy, w, _| dy * w);
            let sgx = lane_sum(dy, w, x, |dy, w, x| dy * w * ((x - mean) * r));
            let (a, b) = (sg * inv_d, sgx * inv_d);
            for ((((dx, &x), &dy), &w), (dw, db)) in dx
                .iter_mut()
                .zip(x)
                .zip(dy)
                .zip(w)
                .zip(dw.iter_mut().zip(db.iter_mut()))
            {
                let h = (x - mean) * r;
                *dx = r * (dy * w - a - h * b);
                *dw += dy * h;
                *db += dy;
            }
        }
        if let Some(plus) = plus {
            dx.iter_mut().zip(plus).for_each(|(dx, p)| *dx += p);
        }
    }
}
