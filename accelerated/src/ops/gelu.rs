//! `gelu(y + b)` (the exact, erf form) as one op: the first MLP layer's bias and activation.
//!
//! With `z = y + b`: forward `z·Φ(z) = (erf(z/√2) + 1)·z/2`, backward
//! `dz = dout·(Φ(z) + z·φ(z))`, `dy = dz`, `db = Σ_rows dz`.
//!
//! `erf` is Abramowitz & Stegun 7.1.26 (|error| ≤ 1.5·10⁻⁷ in exact arithmetic, 5·10⁻⁷ in f32:
//! float noise), the form and constants of PyTorch's vectorised CPU `erf` (which its `gelu`
//! uses), with a branch-free `e^{−x²}` ([`fire_kernels::simd::exp_nonpositive`]) and the
//! multiply-adds of the SIMD path ([`Madd`]: fused under AVX2 and AVX-512), so the loops
//! vectorise to about 40 instructions per 16 values. Candle's `erf_f32` is a scalar rational
//! approximation with branches, and with `f32::exp` in the derivative it made this op a quarter
//! of a training step (measured by `examples/step_profile.rs`). An earlier form here also
//! evaluated erf's Maclaurin series below |x| = 0.5 (erf's *relative* accuracy near 0) and
//! kept the multiply-adds separate: 1.6× the time, for an error in gelu below 10⁻⁷·|z| either
//! way (`erf(x)` enters as `1 + erf`).

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
/// sign restored at the end (|error| ≤ 1.5·10⁻⁷).
#[inline(always)]
pub(crate) fn erf<M: Madd>(x: f32) -> f32 {
    erf_given::<M>(x, exp_nonpositive::<M>(-x * x))
}

/// [`erf`] given `e = e^{−x²}` (which GeLU's derivative needs too, as φ).
#[inline(always)]
fn erf_given<M: Madd>(x: f32, e: f32) -> f32 {
    let t = 1.0 / M::madd(0.327_591_1, x.abs(), 1.0);
    let mut r = 1.061_405_4;
    for c in [-1.453_152_1, 1.421_413_8, -0.284_496_74, 0.254_829_6] {
        r = M::madd(r, t, c);
    }
    M::madd(-(r * t), e, 1.0).copysign(x)
}

/// `z·Φ(z) = z·(1 + erf(z/√2))/2`.
#[inline(always)]
pub(crate) fn gelu<M: Madd>(z: f32) -> f32 {
    (erf::<M>(z * std::f32::consts::FRAC_1_SQRT_2) + 1.0) * 0.5 * z
}

/// d gelu / dz = Φ(z) + z·φ(z), with one exponential: φ(z)·√(2π) = e^{−z²/2} = e^{−x²} for
/// the `x = z/√2` of Φ's erf.
#[inline(always)]
pub(crate) fn gelu_grad<M: Madd>(z: f32) -> f32 {
    const INV_SQRT_2PI: f32 = 0.398_942_3;
    let x = z * std::f32::consts::FRAC_1_SQRT_2;
    let e = exp_nonpositive::<M>(-x * x);
    let cdf = 0.5 * (erf_given::<M>(x, e) + 1.0);
    M::madd(z * INV_SQRT_2PI, e, cdf)
}

/// `z ← z + b` and `out = gelu(z)` over rows of `b.len()`, in one pass, compiled for the CPU's
/// widest vectors ([`fire_kernels::simd::dispatch`]): the loop is branch-free, so it becomes
/// 16-wide under AVX-512.
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
                    *o = gelu::<M>(*z);
                }
            }
        }
    }
    simd::dispatch(Run(z, b, out));
}

/// `out = gelu(y + b)` over rows of `b.len()`, dispatched as [`bias_gelu_into`].
fn bias_gelu_rows(y: &[f32], b: &[f32], out: &mut [f32]) {
    struct Run<'a>(&'a [f32], &'a [f32], &'a mut [f32]);
    impl Kernel for Run<'_> {
        type Output = ();
        #[inline(always)]
        fn run<M: Madd>(self) {
            let Run(y, b, out) = self;
            for (y, o) in y.chunks_exact(b.len()).zip(out.chunks_exact_mut(b.len())) {
                for ((o, &y), &b) in o.iter_mut().zip(y).zip(b) {
                    *o = gelu::<M>(y + b);
                }
            }
        }
    }
    simd::dispatch(Run(y, b, out));
}

/// `dz ← dz·gelu′(z)` elementwise over rows of `db.len()`, adding each row into `db` (the bias
/// gradient), dispatched as [`bias_gelu_into`].
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
                    *dz *= gelu_grad::<M>(z);
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
        map_rows(y, n, &mut out, |y, o| bias_gelu_rows(y, b, o));
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
            simd::dispatch(BackwardRows {
                y,
                b,
                g,
                dy,
                db: &mut db,
            });
            db
        })
        .collect();
    (dy, sum_partials(partials, n))
}

/// `dy = g·gelu′(y + b)` over rows of `b.len()`, each row added into `db`.
struct BackwardRows<'a> {
    y: &'a [f32],
    b: &'a [f32],
    g: &'a [f32],
    dy: &'a mut [f32],
    db: &'a mut [f32],
}

impl Kernel for BackwardRows<'_> {
    type Output = ();
    #[inline(always)]
    fn run<M: Madd>(self) {
        let BackwardRows { y, b, g, dy, db } = self;
        let n = b.len();
        for ((dy, y), g) in dy
            .chunks_exact_mut(n)
            .zip(y.chunks_exact(n))
            .zip(g.chunks_exact(n))
        {
            for ((((dy, &y), &g), &b), db) in dy.iter_mut().zip(y).zip(g).zip(b).zip(db.iter_mut())
            {
                *dy = g * gelu_grad::<M>(y + b);
                *db += *dy;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use fire_kernels::simd::{Fused, Madd, Separate};

    /// Within A&S 7.1.26's bound (1.5·10⁻⁷) plus the f32 rounding of the polynomial (its
    /// alternating coefficients cancel) and of the exp — 5·10⁻⁷ (4.7·10⁻⁷ seen) — of candle's
    /// f64 `erf` on a grid over [−6, 6], with multiply-adds fused or not, and exactly odd.
    fn erf_is_close<M: Madd>() {
        let mut worst = 0f64;
        for k in -6000..=6000 {
            let x = k as f32 / 1000.0;
            let want = candle_core::cpu::erf::erf_f64(f64::from(x));
            let got = f64::from(super::erf::<M>(x));
            worst = worst.max((got - want).abs());
            assert_eq!(super::erf::<M>(-x), -super::erf::<M>(x));
        }
        assert!(worst <= 5e-7, "erf is off by up to {worst:e}");
    }

    #[test]
    fn erf_is_within_5e_7_of_the_f64_erf() {
        erf_is_close::<Separate>();
        erf_is_close::<Fused>();
    }

    /// gelu(z) within erf's error carried through `z·(1 + erf)/2` plus a rounding
    /// (2.6·10⁻⁷·|z|), and gelu′(z) within 4·10⁻⁷·(1 + |z|), of the f64 forms on a grid over
    /// [−10, 10]: near 0, where gelu(z) ≈ z/2, the bound is relative.
    fn gelu_is_close<M: Madd>() {
        let erf = candle_core::cpu::erf::erf_f64;
        for k in -10_000..=10_000 {
            let z = k as f32 / 1000.0;
            let zf = f64::from(z);
            let cdf = 0.5 * (1.0 + erf(zf / std::f64::consts::SQRT_2));
            let want = zf * cdf;
            let got = f64::from(super::gelu::<M>(z));
            assert!(
                (got - want).abs() <= 2.6e-7 * zf.abs(),
                "gelu({z}) = {got}, want {want}"
            );
            let pdf = (-0.5 * zf * zf).exp() / (2.0 * std::f64::consts::PI).sqrt();
            let want = cdf + zf * pdf;
            let got = f64::from(super::gelu_grad::<M>(z));
            assert!(
                (got - want).abs() <= 4e-7 * (1.0 + zf.abs()),
                "gelu'({z}) = {got}, want {want}"
            );
        }
    }

    #[test]
    fn gelu_and_its_derivative_are_within_float_noise_of_the_f64_forms() {
        gelu_is_close::<Separate>();
        gelu_is_close::<Fused>();
    }
}
