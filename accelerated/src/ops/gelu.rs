//! `gelu(y + b)` (the exact, erf form) as one op: the first MLP layer's bias and activation.
//!
//! With `z = y + b`: forward `z·Φ(z)` computed as candle's `gelu_erf` does
//! (`(erf(z/√2) + 1)·z/2`, the same `erf`), backward `dz = dout·(Φ(z) + z·φ(z))`, `dy = dz`,
//! `db = Σ_rows dz`.

use std::sync::Arc;

use candle_core::cpu::erf::erf_f32;
use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::{map_rows, rows_per_task, slice, sum_partials, with_f32};

#[derive(Debug)]
struct BiasGelu;

/// `gelu_erf(y + b)` for `y: [.., n]`, `b: [n]` (f32, CPU), differentiable in both.
pub fn bias_gelu(y: &Tensor, b: &Tensor) -> candle_core::Result<Tensor> {
    y.contiguous()?
        .apply_op2_arc(&b.contiguous()?, Arc::new(Box::new(BiasGelu)))
}

#[inline]
fn gelu(z: f32) -> f32 {
    (erf_f32(z * std::f32::consts::FRAC_1_SQRT_2) + 1.0) * 0.5 * z
}

/// d gelu / dz = Φ(z) + z·φ(z).
#[inline]
fn gelu_grad(z: f32) -> f32 {
    const INV_SQRT_2PI: f32 = 0.398_942_3;
    let cdf = 0.5 * (erf_f32(z * std::f32::consts::FRAC_1_SQRT_2) + 1.0);
    cdf + z * INV_SQRT_2PI * (-0.5 * z * z).exp()
}

impl CustomOp2 for BiasGelu {
    fn name(&self) -> &'static str {
        "fused-bias-gelu"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let y = slice(s1, l1, "bias gelu: y")?;
        let b = slice(s2, l2, "bias gelu: bias")?;
        let n = b.len();
        if n == 0 || l1.shape().dims().last() != Some(&n) {
            candle_core::bail!("bias gelu: y {:?}, bias {n}", l1.shape());
        }
        let mut out = vec![0f32; y.len()];
        map_rows(y, n, &mut out, |y, o| {
            for (y, o) in y.chunks_exact(n).zip(o.chunks_exact_mut(n)) {
                for ((o, &y), &b) in o.iter_mut().zip(y).zip(b) {
                    *o = gelu(y + b);
                }
            }
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    fn bwd(
        &self,
        y: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let n = b.elem_count();
        let (dy, db) = with_f32(y, "bias gelu: y", |y| {
            with_f32(b, "bias gelu: bias", |b| {
                with_f32(grad, "bias gelu: gradient", |g| Ok(backward(y, b, g)))
            })
        })?;
        let dev = y.device();
        let db = Tensor::from_vec(db, n, dev)?.reshape(b.shape())?;
        Ok((Some(Tensor::from_vec(dy, y.shape(), dev)?), Some(db)))
    }
}

/// `(dy, db)`.
fn backward(y: &[f32], b: &[f32], g: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let n = b.len();
    let chunk = rows_per_task(n) * n;
    let mut dy = vec![0f32; y.len()];
    let partials: Vec<Vec<f32>> = dy
        .par_chunks_mut(chunk)
        .zip(y.par_chunks(chunk).zip(g.par_chunks(chunk)))
        .map(|(dy, (y, g))| {
            let mut db = vec![0f32; n];
            for ((dy, y), g) in dy
                .chunks_exact_mut(n)
                .zip(y.chunks_exact(n))
                .zip(g.chunks_exact(n))
            {
                for ((((dy, &y), &g), &b), db) in
                    dy.iter_mut().zip(y).zip(g).zip(b).zip(db.iter_mut())
                {
                    *dy = g * gelu_grad(y + b);
                    *db += *dy;
                }
            }
            db
        })
        .collect();
    (dy, sum_partials(partials, n))
}
