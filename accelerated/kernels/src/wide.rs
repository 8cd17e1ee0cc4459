//! The tile products of the fused attention with register blocks of explicit vectors
//! (`pulp`'s safe [`Simd`] API), under AVX-512 (16 lanes) and AVX2 (8 lanes).
//!
//! The scalar loops of [`crate::inner`] keep a 4 × 16 block that LLVM may or may not keep in
//! registers: under AVX-512 it is only 4 of the 32, and larger blocks written the same way
//! were not kept in registers at all (measured: 4 × 32 and 8 × 16 blocks ran 4–8× *slower*);
//! under AVX2, once the score product's bias start shared the loop, the 4 × 16 block itself
//! was compiled to scalar FMAs spilled to the stack (the forward 10× slower, Zen 3). So here
//! the blocks are arrays of vectors, which the compiler cannot scalarise: under AVX-512 a
//! 4 × 64 score block and a 4 × 64 (or 8 × 32) value block, 16 accumulators each, 16 FMAs for
//! 8 (10) loads a step; under AVX2 4 × 16 blocks, 8 accumulators of AVX2's 16 registers.
//!
//! The arithmetic is exactly that of the [`crate::inner`] loops under [`crate::simd::Fused`]:
//! the same fused multiply-adds in the same order per output, so results are identical, and
//! the tests hold each block to its scalar twin bit for bit.

use pulp::{Simd, WithSimd};

use crate::tile::AffineRow;

/// Where the score product starts from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Start<'a> {
    /// Zero: no bias.
    Zero,
    /// The bias: what `s` holds, except rows with `affine[r]` set, which start from
    /// `a·table[offset + t] + c` ([`crate::tile::BiasPlan::fill_causal_affine`]; an empty list:
    /// every row from `s`).
    Bias {
        table: &'a [f32],
        affine: &'a [Option<AffineRow>],
    },
}

impl<'a> Start<'a> {
    /// The bias, all of it in `s`.
    #[cfg(test)]
    pub(crate) const STORED: Start<'static> = Start::Bias {
        table: &[],
        affine: &[],
    };

    /// `(accumulate, table, affine rows)`.
    #[inline(always)]
    pub(crate) fn parts(self) -> (bool, &'a [f32], &'a [Option<AffineRow>]) {
        match self {
            Start::Zero => (false, &[], &[]),
            Start::Bias { table, affine } => (true, table, affine),
        }
    }
}

/// Keys per score block under AVX-512: 4 vectors of 16 lanes, [`crate::inner::keys`] for 16
/// lanes.
pub(crate) const KEYS: usize = 4 * 16;

/// `s[r, t] (+)= Σ_c q[r, c]·k[t, c]` as [`crate::inner::scores`] states it, with `R` rows of
/// `KV` vectors of `L` lanes (`KV·L` keys, the packing's block) per register block: 4 × 4
/// vectors under AVX-512 (16 of its 32 registers), 4 × 2 under AVX2 (8 of its 16, the key
/// vectors and the broadcast `q` value taking three more).
pub(crate) struct Scores<'a, const R: usize, const KV: usize, const L: usize> {
    /// `[rows, d]`, row-major.
    pub q: &'a [f32],
    pub rows: usize,
    pub kp: &'a [f32],
    pub d: usize,
    pub s: &'a mut [f32],
    pub start: Start<'a>,
    /// Per row of `q`, how many leading keys it needs (the causal mask's visible prefix):
    /// a row block skips the key blocks none of its rows needs. `None`: every key.
    pub limit: Option<&'a [usize]>,
    /// When given, receives each row's largest score over the whole tile (one per row of
    /// `qp`, padding rows included), taken from the registers as the blocks are stored.
    pub max: Option<&'a mut [f32]>,
}

impl<const R: usize, const KV: usize, const L: usize> WithSimd for Scores<'_, R, KV, L> {
    /// `false` (and nothing written) when the vectors are not `L` lanes wide.
    type Output = bool;

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) -> bool {
        if S::F32_LANES != L {
            return false;
        }
        let Scores {
            q,
            rows,
            kp,
            d,
            s,
            start,
            limit,
            max,
        } = self;
        let (accumulate, table, affine) = start.parts();
        // Two copies of the loops: NoPE's product (no bias) is compiled without the bias's
        // start, so that what the start needs cannot cost it registers (measured: a start that
        // picked two-piece rows' pieces lane by lane spilled the accumulators of both, the
        // NoPE forward 1.5x and the FIRE one 1.8x slower).
        let bias = (table, affine);
        if accumulate {
            scores_with::<S, R, KV, true>(simd, q, rows, kp, d, s, bias, limit, max);
        } else {
            scores_with::<S, R, KV, false>(simd, q, rows, kp, d, s, bias, limit, max);
        }
        true
    }
}

/// [`Scores`]' loops (`S` of the lane count [`Scores`] checked); with `BIAS`, each block starts
/// from the bias, `(table, affine)` as [`Start::Bias`] holds them.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn scores_with<S: Simd, const R: usize, const KV: usize, const BIAS: bool>(
    simd: S,
    q: &[f32],
    rows: usize,
    kp: &[f32],
    d: usize,
    s: &mut [f32],
    (table, affine): (&[f32], &[Option<AffineRow>]),
    limit: Option<&[usize]>,
    mut max: Option<&mut [f32]>,
) {
    // Keys per register block: the packing's block.
    let block = KV * S::F32_LANES;
    let kblocks = kp.len() / (d * block);
    let stride = kp.len() / (d * block) * block;
    let want_max = max.is_some();
    for rb in 0..rows.div_ceil(R) {
        // Rows past the last are computed on a repeat of it (stored, never read as data),
        // so the block size stays one the compiler knows.
        let qr: [&[f32]; R] = core::array::from_fn(|r| {
            let at = (rb * R + r).min(rows - 1) * d;
            &q[at..at + d]
        });
        let aff: [Option<AffineRow>; R] =
            core::array::from_fn(|r| affine.get((rb * R + r).min(rows - 1)).copied().flatten());
        let mut row_max = [simd.splat_f32s(f32::NEG_INFINITY); R];
        let needed = block_limit(limit, rb * R, R, rows).map_or(kblocks, |k| k.div_ceil(block));
        for (kb, kblk) in kp.chunks_exact(d * block).enumerate().take(needed) {
            let mut acc = [[simd.splat_f32s(0.0); KV]; R];
            if BIAS {
                for (r, a) in acc.iter_mut().enumerate() {
                    match aff[r] {
                        Some(row) if !row.splits(kb * block..(kb + 1) * block) => {
                            // a·table + c, a multiply then an add, as the fill writes it.
                            let at = row.offset + kb * block;
                            let (t, _) = S::as_simd_f32s(&table[at..at + block]);
                            let (ra, rc) = row.piece(kb * block);
                            let (sa, sc) = (simd.splat_f32s(ra), simd.splat_f32s(rc));
                            for (x, &t) in a.iter_mut().zip(t) {
                                *x = simd.add_f32s(simd.mul_f32s(sa, t), sc);
                            }
                        }
                        // Written out by the fill (a block holding a two-piece row's split
                        // included).
                        _ => {
                            let at = (rb * R + r) * stride + kb * block;
                            let (v, _) = S::as_simd_f32s(&s[at..at + block]);
                            a.copy_from_slice(&v[..KV]);
                        }
                    }
                }
            }
            for (c, kc) in kblk.chunks_exact(block).enumerate() {
                let (kv, _) = S::as_simd_f32s(kc);
                let kv: [S::f32s; KV] = core::array::from_fn(|i| kv[i]);
                for (a, qr) in acc.iter_mut().zip(&qr) {
                    let qv = simd.splat_f32s(qr[c]);
                    for (x, &k) in a.iter_mut().zip(&kv) {
                        *x = simd.mul_add_f32s(qv, k, *x);
                    }
                }
            }
            for (r, a) in acc.iter().enumerate() {
                let at = (rb * R + r) * stride + kb * block;
                let (v, _) = S::as_mut_simd_f32s(&mut s[at..at + block]);
                v[..KV].copy_from_slice(a);
            }
            if want_max {
                for (m, a) in row_max.iter_mut().zip(&acc) {
                    *m = a.iter().fold(*m, |m, &x| simd.max_f32s(m, x));
                }
            }
        }
        if let Some(max) = max.as_deref_mut() {
            for (r, &m) in row_max.iter().enumerate() {
                max[rb * R + r] = simd.reduce_max_f32s(m);
            }
        }
    }
}

/// `acc[r, :] += Σ_t p[r, t]·v[t, :]` as [`crate::inner::weighted_values`] states it, with
/// `R` rows of `DV` vectors of `L` lanes (`DV·L` head dimensions) per register block.
pub(crate) struct Values<'a, const R: usize, const DV: usize, const L: usize> {
    pub p: &'a [f32],
    /// `p[r, t]` is `p[r·stride.0 + t·stride.1]`.
    pub stride: (usize, usize),
    pub rows: usize,
    /// Per row, how many leading `t` have a nonzero weight (the rest are skipped); `None`: all.
    pub limit: Option<&'a [usize]>,
    pub v: &'a [f32],
    pub keys: usize,
    pub d: usize,
    pub acc: &'a mut [f32],
}

impl<const R: usize, const DV: usize, const L: usize> WithSimd for Values<'_, R, DV, L> {
    /// `false` (and nothing written) when the vectors are not `L` lanes wide.
    type Output = bool;

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) -> bool {
        if S::F32_LANES != L {
            return false;
        }
        let Values {
            p,
            stride,
            rows,
            limit,
            v,
            keys,
            d,
            acc,
        } = self;
        let dims = DV * L;
        let full = d / dims * dims;
        for r0 in (0..rows).step_by(R) {
            let nr = R.min(rows - r0);
            // Rows past the last are computed on a repeat of it and never stored: one code
            // path, whose block size the compiler knows, so the block stays in registers.
            let prow: [usize; R] = core::array::from_fn(|r| (r0 + r).min(rows - 1) * stride.0);
            let keys = block_limit(limit, r0, R, rows).map_or(keys, |k| k.min(keys));
            for c0 in (0..full).step_by(dims) {
                let mut a = [[simd.splat_f32s(0.0); DV]; R];
                // Written out here, not in a closure or a helper taking the block by reference:
                // a closure is not compiled with the dispatch's target features (its
                // intrinsics stay calls, measured 10x slower), and a block behind a reference
                // was stored to memory every step.
                if stride.1 == 1 {
                    // Rows of `p` in place (the forward's and dq's case): each row a slice of
                    // `keys` weights and `v` walked row by row, so the loop holds no index
                    // arithmetic or bounds checks it would have to keep registers for (with
                    // them, its integers spilled to the stack inside the loop).
                    let pr: [&[f32]; R] = core::array::from_fn(|r| &p[prow[r]..prow[r] + keys]);
                    for (t, vrow) in (0..keys).zip(v.chunks_exact(d)) {
                        let (vt, _) = S::as_simd_f32s(&vrow[c0..c0 + dims]);
                        let vt: [S::f32s; DV] = core::array::from_fn(|i| vt[i]);
                        for r in 0..R {
                            let w = simd.splat_f32s(pr[r][t]);
                            for j in 0..DV {
                                a[r][j] = simd.mul_add_f32s(w, vt[j], a[r][j]);
                            }
                        }
                    }
                } else if stride.0 == 1 && nr == R && rows <= stride.1 {
                    // `p` transposed in place (the backward's dV and dK): the block's `R`
                    // weights for `t` lie side by side in `p`'s row `t`.
                    let rows_t = p.chunks(stride.1).zip(v.chunks_exact(d)).take(keys);
                    for (prow_t, vrow) in rows_t {
                        let (vt, _) = S::as_simd_f32s(&vrow[c0..c0 + dims]);
                        let vt: [S::f32s; DV] = core::array::from_fn(|i| vt[i]);
                        let w = &prow_t[r0..r0 + R];
                        for r in 0..R {
                            let w = simd.splat_f32s(w[r]);
                            for j in 0..DV {
                                a[r][j] = simd.mul_add_f32s(w, vt[j], a[r][j]);
                            }
                        }
                    }
                } else {
                    for t in 0..keys {
                        let (vt, _) = S::as_simd_f32s(&v[t * d + c0..t * d + c0 + dims]);
                        let vt: [S::f32s; DV] = core::array::from_fn(|i| vt[i]);
                        let pt = t * stride.1;
                        for r in 0..R {
                            let w = simd.splat_f32s(p[prow[r] + pt]);
                            for j in 0..DV {
                                a[r][j] = simd.mul_add_f32s(w, vt[j], a[r][j]);
                            }
                        }
                    }
                }
                for (r, ar) in a.iter().enumerate().take(nr) {
                    let at = (r0 + r) * d + c0;
                    let (dst, _) = S::as_mut_simd_f32s(&mut acc[at..at + dims]);
                    for (x, &y) in dst.iter_mut().zip(ar) {
                        *x = simd.add_f32s(*x, y);
                    }
                }
            }
            for r in (r0..r0 + nr).filter(|_| full < d) {
                for t in 0..keys {
                    let w = p[r * stride.0 + t * stride.1];
                    for c in full..d {
                        acc[r * d + c] = w.mul_add(v[t * d + c], acc[r * d + c]);
                    }
                }
            }
        }
        true
    }
}

/// The largest `limit` over rows `r0..r0 + n` (clamped to `rows`), or `None` without limits.
#[inline(always)]
pub(crate) fn block_limit(
    limit: Option<&[usize]>,
    r0: usize,
    n: usize,
    rows: usize,
) -> Option<usize> {
    limit.map(|l| {
        l[r0.min(rows)..(r0 + n).min(rows)]
            .iter()
            .copied()
            .max()
            .unwrap_or(0)
    })
}
