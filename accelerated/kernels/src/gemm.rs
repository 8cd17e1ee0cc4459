//! Matrix products on `f32` slices through the `gemm` crate (the kernels candle's own CPU
//! products use), behind a safe, bounds-checked interface: the one module of this crate with
//! `unsafe`.
//!
//! Why not candle's `matmul`: the fused transformer block of `fire-accelerated` works on plain
//! slices inside one custom op, and a product there through candle would copy each operand into
//! a tensor and back. Why not a loop of our own: at the training step's shapes (2 048 × 128 ×
//! 512) `gemm`'s packed, cache-blocked AVX-512 microkernels run at 150–290 GFLOP/s on two cores,
//! several times what a register-blocked loop reaches (measured in the crate's benches).
//!
//! A [`Mat`] is a strided view: element `(r, c)` is `data[r·row_stride + c·col_stride]`, so a
//! transpose is a view with the strides swapped and nothing is copied. [`matmul`] checks every
//! view against its slice before the call; [`matmul_twin`] is the obvious triple loop the
//! tests hold it to.

use crate::error::{shape, Error, Result};

/// A strided, read-only matrix view of a slice.
#[derive(Debug, Clone, Copy)]
pub struct Mat<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

impl<'a> Mat<'a> {
    /// `data` as a row-major `rows × cols` matrix (`data.len()` must be `rows·cols`).
    pub fn row_major(data: &'a [f32], rows: usize, cols: usize) -> Result<Self> {
        if data.len() != rows * cols {
            return Err(shape(
                "row-major matrix",
                format!("{rows}×{cols} = {}", rows * cols),
                data.len(),
            ));
        }
        Ok(Self {
            data,
            rows,
            cols,
            row_stride: cols,
            col_stride: 1,
        })
    }

    /// The transpose (a view; nothing moves).
    pub fn t(self) -> Self {
        Self {
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
            ..self
        }
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Element `(r, c)`.
    fn at(&self, r: usize, c: usize) -> f32 {
        self.data[r * self.row_stride + c * self.col_stride]
    }

    /// Whether every element the view names lies inside its slice.
    fn in_bounds(&self) -> bool {
        if self.rows == 0 || self.cols == 0 {
            return true;
        }
        let last = (self.rows - 1)
            .checked_mul(self.row_stride)
            .and_then(|a| (self.cols - 1).checked_mul(self.col_stride).map(|b| (a, b)))
            .and_then(|(a, b)| a.checked_add(b));
        matches!(last, Some(i) if i < self.data.len())
    }
}

/// `dst (+)= a·b` with `dst` row-major `a.rows() × b.cols()`: overwritten, or added to with
/// `accumulate`. Runs on rayon's pool when it has more than one thread.
pub fn matmul(dst: &mut [f32], a: Mat<'_>, b: Mat<'_>, accumulate: bool) -> Result<()> {
    let (m, k, n) = check(dst, &a, &b)?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        if !accumulate {
            dst.fill(0.0);
        }
        return Ok(());
    }
    let threads = rayon::current_num_threads();
    let parallelism = if threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    // Strides as `isize`: every stride is at most a slice length (checked above through
    // `in_bounds`), and a slice never holds more than `isize::MAX` bytes.
    let s = |x: usize| x as isize;
    #[allow(unsafe_code)]
    // SAFETY: `gemm` reads `a` at `a.data[r·row_stride + c·col_stride]` for r < m, c < k, `b`
    // likewise for r < k, c < n, and reads and writes `dst[r·n + c]` for r < m, c < n. `check`
    // proved `dst.len() == m·n` and, through `in_bounds`, that the largest index of each view
    // is inside its slice; the three slices are distinct borrows (`dst` is `&mut`), so nothing
    // aliases. The pointers stay valid for the call, which does not keep them.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            s(n),
            accumulate,
            a.data.as_ptr(),
            s(a.col_stride),
            s(a.row_stride),
            b.data.as_ptr(),
            s(b.col_stride),
            s(b.row_stride),
            if accumulate { 1.0 } else { 0.0 },
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
    Ok(())
}

/// [`matmul`]'s slow twin: the triple loop, summing in `f64`.
pub fn matmul_twin(dst: &mut [f32], a: Mat<'_>, b: Mat<'_>, accumulate: bool) -> Result<()> {
    let (m, k, n) = check(dst, &a, &b)?;
    for r in 0..m {
        for c in 0..n {
            let sum: f64 = (0..k)
                .map(|i| f64::from(a.at(r, i)) * f64::from(b.at(i, c)))
                .sum();
            let d = &mut dst[r * n + c];
            *d = if accumulate {
                (f64::from(*d) + sum) as f32
            } else {
                sum as f32
            };
        }
    }
    Ok(())
}

/// `(m, k, n)` once the shapes agree and every view lies inside its slice.
fn check(dst: &[f32], a: &Mat<'_>, b: &Mat<'_>) -> Result<(usize, usize, usize)> {
    if a.cols != b.rows {
        return Err(shape("matrix product (inner dimensions)", a.cols, b.rows));
    }
    let (m, k, n) = (a.rows, a.cols, b.cols);
    if dst.len() != m * n {
        return Err(shape(
            "matrix product (destination)",
            format!("{m}×{n} = {}", m * n),
            dst.len(),
        ));
    }
    for (what, v) in [("left", a), ("right", b)] {
        if !v.in_bounds() {
            return Err(Error::Invalid {
                what: format!("{what} operand of a matrix product"),
                reason: format!(
                    "a {}×{} view with strides ({}, {}) reaches past its {} values",
                    v.rows,
                    v.cols,
                    v.row_stride,
                    v.col_stride,
                    v.data.len()
                ),
            });
        }
    }
    Ok((m, k, n))
}
