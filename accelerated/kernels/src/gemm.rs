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

use gemm::Parallelism as Par;
use rayon::prelude::*;

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

    /// Rows `range` of the view (the slice starts at the band's first row).
    fn row_band(self, range: std::ops::Range<usize>) -> Self {
        Self {
            data: &self.data[range.start * self.row_stride..],
            rows: range.len(),
            ..self
        }
    }

    /// Columns `range` of the view.
    fn col_band(self, range: std::ops::Range<usize>) -> Self {
        Self {
            data: &self.data[range.start * self.col_stride..],
            cols: range.len(),
            ..self
        }
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
/// `accumulate`. Runs on rayon's pool when it has more than one thread, in
/// [`Threading::Bands`].
pub fn matmul(dst: &mut [f32], a: Mat<'_>, b: Mat<'_>, accumulate: bool) -> Result<()> {
    matmul_threaded(dst, a, b, accumulate, Threading::Bands)
}

/// How [`matmul_threaded`] spreads one product over rayon's threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threading {
    /// The output cut into one band of rows or columns per thread, each band one
    /// single-threaded `gemm` call (what [`matmul`] does). Measured at the training step's
    /// shapes on two AVX-512 cores (`examples/gemm_timing.rs`, median of 40 interleaved
    /// calls): 1.00–1.16× the GFLOP/s of [`Threading::Gemm`], most on the weight gradients
    /// (k = B·T), and 1.45× on the small step's 128 × 2 048 × 512 one. Bands of columns while each keeps ≥ 256 of them (the
    /// forward's 2 048 × 256 × 768 runs best so), else of rows while each keeps ≥ 64; a
    /// product too small for either is one call with `gemm`'s own split.
    Bands,
    /// One `gemm` call with `gemm`'s own rayon split (kept to measure the bands against).
    Gemm,
}

/// [`matmul`] with the threading chosen.
pub fn matmul_threaded(
    dst: &mut [f32],
    a: Mat<'_>,
    b: Mat<'_>,
    accumulate: bool,
    threading: Threading,
) -> Result<()> {
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
    let out = Dst {
        ptr: dst.as_mut_ptr(),
        row_stride: n,
    };
    let threads = rayon::current_num_threads();
    let split = match threading {
        Threading::Bands => Split::choose(m, n, threads),
        Threading::Gemm if threads > 1 => Split::Whole(Par::Rayon(threads)),
        Threading::Gemm => Split::Whole(Par::None),
    };
    match split {
        Split::Whole(parallelism) => product(out, a, b, accumulate, parallelism),
        Split::Rows(band) => (0..m.div_ceil(band)).into_par_iter().for_each(|i| {
            let rows = i * band..(m.min((i + 1) * band));
            product(
                out.row_band(rows.start),
                a.row_band(rows),
                b,
                accumulate,
                Par::None,
            );
        }),
        Split::Cols(band) => (0..n.div_ceil(band)).into_par_iter().for_each(|i| {
            let cols = i * band..(n.min((i + 1) * band));
            product(
                out.col_band(cols.start),
                a,
                b.col_band(cols),
                accumulate,
                Par::None,
            );
        }),
    }
    Ok(())
}

/// The calls one product makes (see [`Threading::Bands`]).
#[derive(Debug, Clone, Copy)]
enum Split {
    /// One call.
    Whole(Par),
    /// Bands of this many rows, one call each.
    Rows(usize),
    /// Bands of this many columns, one call each.
    Cols(usize),
}

impl Split {
    fn choose(m: usize, n: usize, threads: usize) -> Self {
        // Bands rounded up to a multiple of 16 (an AVX-512 register of f32).
        let band = |len: usize| len.div_ceil(threads).div_ceil(16) * 16;
        if threads < 2 {
            Split::Whole(Par::None)
        } else if n / threads >= 256 {
            Split::Cols(band(n))
        } else if m / threads >= 64 {
            Split::Rows(band(m))
        } else {
            Split::Whole(Par::Rayon(threads))
        }
    }
}

/// The destination of [`matmul`]: element `(r, c)` at `ptr + r·row_stride + c`, inside the
/// `&mut` slice `matmul` took it from (checked there: `m·n` values, `row_stride = n`).
#[derive(Debug, Clone, Copy)]
struct Dst {
    ptr: *mut f32,
    row_stride: usize,
}

#[allow(unsafe_code)]
// SAFETY: a `Dst` is the unique borrow `matmul` holds for the duration of the call; the
// bands handed to different threads ([`Dst::row_band`], [`Dst::col_band`] with disjoint ranges)
// name disjoint elements, so sharing it between the pool's threads races on nothing.
unsafe impl Send for Dst {}
#[allow(unsafe_code)]
// SAFETY: as for `Send`: the threads touch disjoint bands only.
unsafe impl Sync for Dst {}

impl Dst {
    /// The rows from `first` on (pointer arithmetic only; `product` writes only the band).
    fn row_band(self, first: usize) -> Self {
        Self {
            ptr: self.ptr.wrapping_add(first * self.row_stride),
            ..self
        }
    }

    /// The columns from `first` on.
    fn col_band(self, first: usize) -> Self {
        Self {
            ptr: self.ptr.wrapping_add(first),
            ..self
        }
    }
}

/// One `gemm` call: `dst[..a.rows(), ..b.cols()] (+)= a·b`.
fn product(dst: Dst, a: Mat<'_>, b: Mat<'_>, accumulate: bool, parallelism: Par) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    // Strides as `isize`: every stride is at most a slice length (checked through
    // `in_bounds`), and a slice never holds more than `isize::MAX` bytes.
    let s = |x: usize| x as isize;
    #[allow(unsafe_code)]
    // SAFETY: `gemm` reads `a` at `a.data[r·row_stride + c·col_stride]` for r < m, c < k, `b`
    // likewise for r < k, c < n: `check` proved, through `in_bounds`, that the largest such
    // index of each view is inside its slice, and a band of a view ([`Mat::row_band`],
    // [`Mat::col_band`]) starts its slice where the band starts, so this holds for bands too. It
    // reads and writes `dst.ptr[r·row_stride + c]` for r < m, c < n: `matmul` checked that its
    // destination holds `a.rows()·b.cols()` values with `row_stride = b.cols()`, and a band's
    // pointer is offset to the band's first row or column, so every element written lies in
    // the band, inside the destination; bands of one call are disjoint (see `Dst`'s `Send`).
    // `dst` is a `&mut` borrow in `matmul`, distinct from `a` and `b`, so nothing aliases.
    // The pointers stay valid for the call, which does not keep them.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.ptr,
            1,
            s(dst.row_stride),
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
