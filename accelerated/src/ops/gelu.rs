//! `gelu(y + b)` (the exact, erf form) as one op: the first MLP layer's bias and activation.
//!
//! With `z = y + b`: forward `z·Φ(z) = (erf(z/√2) + 1)·z/2`, backward
//! `dz = dout·(Φ(z) + z·φ(z))`, `dy = dz`, `db = Σ_rows dz`.
//!
//! `erf` is Abramowitz & Stegun 7.1.26 (|error| ≤ 1.5·10⁻⁷ in exact arithmetic, 4·10⁻⁷ in f32:
//! float noise; the same form PyTorch's vectorised CPU `erf` uses) with a branch-free `e^{−x²}`
//! ([`fire_kernels::simd::exp_nonpositive`]), so the loops vectorise. Candle's `erf_f32` is a
//! scalar rational approximation with branches, and with `f32::exp` in the derivative it made
//! this op a quarter of a training step (measured by `examples/step_profile.rs`).

use std::sync::Arc;

use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor};
use fire_kernels::simd::{self, exp_nonpositive, Kernel, Madd};
use rayon::prelude::*;

use super::{map_rows, rows_per_task, slice, sum_partials, with_f32};

#[derive(Debug)]
struct BiasGelu;

/// `gelu_erf(y + b)` for `y: [.., n]`, `b: [n]` (f32, CPU), differentiable in both.
pub fn bias_gelu(y: &Tensor, b: &Tensor) -> candle_core::Result<Tensor> {
    y.contiguous()?
        .apply_op2_arc(&b.contiguous()?, Arc::new(Box::new(BiasGelu)))
}

/// erf(x) by Abramowitz & Stegun 7.1.26: `1 − t·r(t)·e^{−x²}` with `t = 1/(1 + p·|x|)`, the
/// sign restored at the end; below |x| = 0.5, where `1 − …` cancels, the Maclaurin series to
/// x¹¹ (truncation < 2·10⁻⁸). Both are computed and one selected, so the loop stays
/// branch-free.
#[inline(always)]
pub(crate) fn erf(x: f32) -> f32 {
    erf_given(x, exp_nonpositive(-x * x))
}

/// [`erf`] given `e = e^{−x²}` (which GeLU's derivative needs too, as φ).
#[inline(always)]
fn erf_given(x: f32, e: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / (0.327_591_1 * a + 1.0);
    let r =
        (((1.061_405_4 * t - 1.453_152_1) * t + 1.421_413_8) * t - 0.284_496_74) * t + 0.254_829_6;
    let large = (1.0 - r * t * e).copysign(x);
    let x2 = x * x;
    let series =
        ((((-1.0 / 1320.0 * x2 + 1.0 / 216.0) * x2 - 1.0 / 42.0) * x2 + 0.1) * x2 - 1.0 / 3.0) * x2
            + 1.0;
    let small = std::f32::consts::FRAC_2_SQRT_PI * x * series;
    if a < 0.5 {
        small
    } else {
        large
    }
}

#[inline(always)]
pub(crate) fn gelu(z: f32) -> f32 {
    (erf(z * std::f32::consts::FRAC_1_SQRT_2) + 1.0) * 0.5 * z
}

/// d gelu / dz = Φ(z) + z·φ(z), with one exponential: φ(z)·√(2π) = e^{−z²/2} = e^{−x²} for
/// the `x = z/√2` of Φ's erf.
#[inline(always)]
pub(crate) fn gelu_grad(z: f32) -> f32 {
    const INV_SQRT_2PI: f32 = 0.398_942_3;
    let x = z * std::f32::consts::FRAC_1_SQRT_2;
    let e = exp_nonpositive(-x * x);
    let cdf = 0.5 * (erf_given(x, e) + 1.0);
    cdf + z * INV_SQRT_2PI * e
}

/// `z ← z + b` and `out = gelu(z)` over rows of `b.len()`, in one pass, compiled for the CPU's
/// widest vectors ([`fire_kernels::simd::dispatch`]): the loop is branch-free, so it becomes
/// 16-wide under AVX-512 (the results are the same on every path: elementwise, no fused
/// multiply-adds).
pub(crate) fn bias_gelu_into(z: &mut [f32], b: &[f32], out: &mut [f32]) {
    struct Run<'a>(&'a mut [f32], &'a [f32], &'a mut [f32]);
    impl Kernel for Run<'_> {
        type Output = ();
        #[inline(always)]
        fn run<M: Madd>(self) {
            let Run(z, b, out) = self;
            for (z, o) in z
                .chunks_exact_mut(b.len())
                .zip(out.chunks_exact_mut(b.len()))
            {
                for ((z, o), &b) in z.iter_mut().zip(o).zip(b) {
                    *z += b;
                    *o = gelu(*z);
                }
            }
        }
    }
    simd::dispatch(Run(z, b, out));
}

/// `dz ← dz·gelu′(z)` elementwise over rows of `db.len()`, adding each row into `db` (the bias
/// gradient), dispatched as [`gelu_into`].
pub(crate) fn gelu_backward_rows(z: &[f32], dz: &mut [f32], db: &mut [f32]) {
    struct Run<'a>(&'a [f32], &'a mut [f32], &'a mut [f32]);
    impl Kernel for Run<'_> {
        type Output = ();
        #[inline(always)]
        fn run<M: Madd>(self) {
            let Run(z, dz, db) = self;
            let f = db.len();
            for (dz, z) in dz.chunks_exact_mut(f).zip(z.chunks_exact(f)) {
                for ((dz, &z), db) in dz.iter_mut().zip(z).zip(db.iter_mut()) {
                    *dz *= gelu_grad(z);
                    *db += *dz;
                }
            }
        }
    }
    simd::dispatch(Run(z, dz, db));
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

#[cfg(test)]
mod tests {
    /// Within A&S 7.1.26's bound (1.5·10⁻⁷) plus the f32 rounding of the polynomial and the
    /// exp of candle's f64 `erf` on a grid over [−6, 6] (and within 1·10⁻⁶ relative below 0.5,
    /// where the series takes over), and exactly odd.
    #[test]
    fn erf_is_within_4e_7_of_the_f64_erf() {
        for k in -6000..=6000 {
            let x = k as f32 / 1000.0;
            let want = candle_core::cpu::erf::erf_f64(f64::from(x));
            let got = f64::from(super::erf(x));
            assert!((got - want).abs() <= 4e-7, "erf({x}) = {got}, want {want}");
            if x.abs() < 0.5 {
                assert!((got - want).abs() <= 1e-6 * want.abs(), "erf({x}) = {got}");
            }
            assert_eq!(super::erf(-x), -super::erf(x));
        }
    }
}
