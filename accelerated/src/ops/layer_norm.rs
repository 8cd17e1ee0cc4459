//! Layer normalisation over the last dimension as one op: `y = (x − μ)·r·γ + β` with
//! `r = 1/√(σ² + ε)` (biased variance, as PyTorch's `LayerNorm`).
//!
//! Backward, per row with `x̂ = (x − μ)·r` and `g = dy ⊙ γ`:
//! `dx = r·(g − mean(g) − x̂·mean(g ⊙ x̂))`, `dγ = Σ_rows dy ⊙ x̂`, `dβ = Σ_rows dy`.
//! The row statistics are recomputed from `x` (one pass; nothing is kept between the passes).

use std::sync::Arc;

use candle_core::{CpuStorage, CustomOp3, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::{map_rows, rows_per_task, slice, sum_partials, with_f32};

#[derive(Debug)]
struct LayerNorm {
    eps: f32,
}

/// `(μ, r)` of one row.
#[inline]
fn stats(x: &[f32], eps: f32) -> (f32, f32) {
    let inv_d = 1.0 / x.len() as f32;
    let mean = x.iter().sum::<f32>() * inv_d;
    let var = x.iter().map(|&v| (v - mean) * (v - mean)).sum::<f32>() * inv_d;
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
    let d = w.len();
    map_rows(x, d, out, |x, o| {
        for (x, o) in x.chunks_exact(d).zip(o.chunks_exact_mut(d)) {
            let (mean, r) = stats(x, eps);
            for (((o, &x), &w), &b) in o.iter_mut().zip(x).zip(w).zip(b) {
                *o = (x - mean) * r * w + b;
            }
        }
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
    if dy.len() != x.len() {
        candle_core::bail!("layer norm: gradient {} for {} values", dy.len(), x.len());
    }
    let mut dx = vec![0f32; x.len()];
    let chunk = rows_per_task(d) * d;
    let inv_d = 1.0 / d as f32;
    let partials: Vec<(Vec<f32>, Vec<f32>)> = dx
        .par_chunks_mut(chunk)
        .zip(x.par_chunks(chunk).zip(dy.par_chunks(chunk)))
        .map(|(dx, (x, dy))| {
            let (mut dw, mut db) = (vec![0f32; d], vec![0f32; d]);
            let mut xhat = vec![0f32; d];
            for ((dx, x), dy) in dx
                .chunks_exact_mut(d)
                .zip(x.chunks_exact(d))
                .zip(dy.chunks_exact(d))
            {
                let (mean, r) = stats(x, eps);
                let (mut sg, mut sgx) = (0f32, 0f32);
                for ((h, &x), (&dy, &w)) in xhat.iter_mut().zip(x).zip(dy.iter().zip(w)) {
                    *h = (x - mean) * r;
                    let g = dy * w;
                    sg += g;
                    sgx += g * *h;
                }
                let (a, b) = (sg * inv_d, sgx * inv_d);
                for (i, dx) in dx.iter_mut().enumerate() {
                    let g = dy[i] * w[i];
                    *dx = r * (g - a - xhat[i] * b);
                    dw[i] += dy[i] * xhat[i];
                    db[i] += dy[i];
                }
            }
            (dw, db)
        })
        .collect();
    let (dws, dbs): (Vec<_>, Vec<_>) = partials.into_iter().unzip();
    Ok((dx, sum_partials(dws, d), sum_partials(dbs, d)))
}
