//! The inner loops of the fused attention: a vectorisable exp and register-blocked tile
//! products, in safe Rust written so the compiler keeps the accumulators in SIMD registers.
//!
//! Every function is `#[inline(always)]` and generic over [`Madd`], so that inside
//! [`crate::simd::dispatch`] it compiles to the CPU's widest vectors with fused multiply-adds.
//! The scalar register blocks here (`ROWS × 16` for the score product, 4 × 16 for the value
//! product) are the plain path's and the twins of [`crate::wide`]'s explicit vector blocks,
//! which the two products take under AVX2 (the same 4 × 16 blocks, 8 of its 16 registers) and
//! AVX-512 (4 × 64 blocks).

use crate::simd::{Kernel, Madd};
use crate::wide;
pub(crate) use crate::wide::Start;

/// Rows per register block of the score product (queries are padded to a multiple).
pub(crate) const ROWS: usize = 4;
/// Keys per register block of the score product under 8 lanes.
const KEYS: usize = 16;
/// Head dims per register block of the value product under 8 lanes.
const DIMS: usize = 16;

/// Keys per register block of the score product for `M`'s vectors: the padding unit of the
/// packed key tiles and of the score tile's row stride.
#[inline(always)]
pub(crate) const fn keys<M: Madd>() -> usize {
    if M::LANES >= 16 {
        wide::KEYS
    } else {
        KEYS
    }
}

/// `e^x` for `x ≤ 0` (softmax weights after the max is subtracted), Cephes-style: round
/// `x·log2 e` to `n`, reduce by `n·ln 2` in two parts, a degree-6 polynomial on the rest, and
/// scale by `2^n` through the exponent bits. Relative error ~2 ulp. Below `−60` it returns
/// exactly 0: e^−60 ≈ 1e-26 is far below f32 resolution of a softmax sum (≥ 1), and tiny
/// weights would otherwise make denormal products in the value accumulation (10× slower on
/// x86; Kerple-power's large negative biases hit this). Branch-free so loops vectorise.
#[inline(always)]
pub(crate) fn exp<M: Madd>(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const ROUND: f32 = 12_582_912.0; // 1.5·2^23: adding it rounds to an integer
    let x = x.clamp(-87.0, 88.0);
    // `t` holds n in its low mantissa bits (|n| ≤ 126 < 2^22, spacing 1 around ROUND).
    let t = M::madd(x, LOG2E, ROUND);
    let n = t - ROUND;
    let r = M::madd(n, 2.121_944_4e-4, M::madd(n, -0.693_359_4, x));
    let mut p = 1.987_569_1e-4;
    for c in [
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        0.5,
    ] {
        p = M::madd(p, r, c);
    }
    let y = M::madd(p, r * r, r) + 1.0;
    // 2^n through the exponent bits. `n as i32` would be Rust's saturating conversion, which
    // LLVM does not vectorise (it checked every lane for NaN one at a time); `t`'s bits minus
    // ROUND's are n exactly, and the exponent's bias 127 is folded into the subtrahend (one
    // subtraction: `t` itself, not `n + ROUND` recomputed, the same bits).
    const BIASED: i32 = ROUND.to_bits() as i32 - 127;
    let bits = ((t.to_bits() as i32 - BIASED) as u32) << 23;
    let e = y * f32::from_bits(bits);
    if x < -60.0 {
        0.0
    } else {
        e
    }
}

/// Packs `n` rows of `src` (`[n, d]` row-major), times `scale`, into blocks of `block` rows:
/// block `b` is `[d, block]` (dimension-major), the last one zero-padded.
#[inline(always)]
pub(crate) fn pack(src: &[f32], n: usize, d: usize, block: usize, scale: f32, dst: &mut Vec<f32>) {
    dst.clear();
    dst.resize(packed_len(n, d, block), 0.0);
    pack_into(src, n, d, block, scale, dst);
}

/// The length of `n` rows of width `d` packed in blocks of `block` rows.
pub(crate) const fn packed_len(n: usize, d: usize, block: usize) -> usize {
    n.div_ceil(block) * d * block
}

/// [`pack`] into a zeroed slice of [`packed_len`] values.
#[inline(always)]
pub(crate) fn pack_into(
    src: &[f32],
    n: usize,
    d: usize,
    block: usize,
    scale: f32,
    dst: &mut [f32],
) {
    for (r, row) in src.chunks_exact(d).take(n).enumerate() {
        let blk = &mut dst[(r / block) * d * block..(r / block + 1) * d * block];
        for (c, &v) in row.iter().enumerate() {
            blk[c * block + r % block] = v * scale;
        }
    }
}

/// [`pack_into`] under the SIMD dispatch (the caller's loop over heads runs outside it):
/// compiled for the baseline target, the packing had been an eighth of a forward at 128
/// tokens (64 heads × 32, one thread), a twentieth under AVX-512. (A loop writing each block's
/// rows contiguously from strided reads, gathered, was twice as slow as this one.)
pub(crate) struct PackInto<'a> {
    pub src: &'a [f32],
    pub n: usize,
    pub d: usize,
    pub block: usize,
    pub scale: f32,
    pub dst: &'a mut [f32],
}

impl Kernel for PackInto<'_> {
    type Output = ();
    #[inline(always)]
    fn run<M: Madd>(self) {
        pack_into(self.src, self.n, self.d, self.block, self.scale, self.dst);
    }
}

/// `s[r, t] (+)= Σ_c q[r, c]·k[t, c]` for `q: [rows, d]` row-major (read in place: the product
/// broadcasts one `q` value at a time, so it needs no packed copy) and `k` packed in blocks of
/// [`keys::<M>()`](keys); `s` is `[⌈rows/ROWS⌉·ROWS, key blocks·keys]` row-major, its padding
/// rows written with a repeat of the last row.
/// The scores start from `start`: zero, or the bias (in `s`, or for some rows affine in a
/// table, [`wide::Start`]). With `limit` (per row, how many leading keys it sees), a block of
/// rows skips the key blocks none of its rows sees: those entries are left as they were. With
/// `max`, each row's largest score over the whole tile (every key block) is written
/// there as well, one per row of `qp` (the softmax's shift, without a pass over `s`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn scores<M: Madd>(
    q: &[f32],
    rows: usize,
    kp: &[f32],
    d: usize,
    s: &mut [f32],
    start: Start<'_>,
    limit: Option<&[usize]>,
    max: Option<&mut [f32]>,
) {
    // Explicit vectors on the wide paths: written as plain loops over a 4 × 16 block of
    // scalars ([`scores_blocked`]) the AVX2 product was compiled to scalar FMAs with the
    // block spilled to the stack once the bias's start shared the loop (measured: the NoPE
    // forward 10x slower than PyTorch's SDPA at 2 048 tokens on Zen 3).
    let mut max = max;
    let done = match M::LANES {
        16 => pulp::Arch::new().dispatch(wide::Scores::<ROWS, 4, 16> {
            q,
            rows,
            kp,
            d,
            s,
            start,
            limit,
            max: max.as_deref_mut(),
        }),
        8 => pulp::Arch::new().dispatch(wide::Scores::<ROWS, 2, 8> {
            q,
            rows,
            kp,
            d,
            s,
            start,
            limit,
            max: max.as_deref_mut(),
        }),
        _ => false,
    };
    if !done {
        // The plain path, and 8-lane kernels on CPUs whose vectors are narrower (NEON).
        scores_scalar::<M>(q, rows, kp, d, s, start, limit, max);
    }
}

/// [`scores`] with a [`ROWS`] × [`keys::<M>()`](keys) block of scalars: the plain path's
/// loops, and the twin the explicit vector blocks are tested against.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn scores_scalar<M: Madd>(
    q: &[f32],
    rows: usize,
    kp: &[f32],
    d: usize,
    s: &mut [f32],
    start: Start<'_>,
    limit: Option<&[usize]>,
    max: Option<&mut [f32]>,
) {
    if M::LANES >= 16 {
        scores_blocked::<M, { wide::KEYS }>(q, rows, kp, d, s, start, limit, max);
    } else {
        scores_blocked::<M, KEYS>(q, rows, kp, d, s, start, limit, max);
    }
}

/// [`scores_scalar`] with `K` keys per block.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn scores_blocked<M: Madd, const K: usize>(
    q: &[f32],
    rows: usize,
    kp: &[f32],
    d: usize,
    s: &mut [f32],
    start: Start<'_>,
    limit: Option<&[usize]>,
    mut max: Option<&mut [f32]>,
) {
    let (accumulate, table, affine) = start.parts();
    let kblocks = kp.len() / (d * K);
    let stride = kblocks * K;
    for rb in 0..rows.div_ceil(ROWS) {
        let qr: [&[f32]; ROWS] = std::array::from_fn(|r| {
            let at = (rb * ROWS + r).min(rows - 1) * d;
            &q[at..at + d]
        });
        if let Some(max) = max.as_deref_mut() {
            max[rb * ROWS..(rb + 1) * ROWS].fill(f32::NEG_INFINITY);
        }
        let needed =
            wide::block_limit(limit, rb * ROWS, ROWS, rows).map_or(kblocks, |k| k.div_ceil(K));
        for (kb, kblk) in kp.chunks_exact(d * K).enumerate().take(needed) {
            let mut acc = [[0f32; K]; ROWS];
            if accumulate {
                for (r, a) in acc.iter_mut().enumerate() {
                    let row = affine.get((rb * ROWS + r).min(rows - 1)).copied().flatten();
                    match row {
                        Some(row) if !row.splits(kb * K..(kb + 1) * K) => {
                            let (ra, rc) = row.piece(kb * K);
                            let at = row.offset + kb * K;
                            for (x, &t) in a.iter_mut().zip(&table[at..at + K]) {
                                *x = ra * t + rc;
                            }
                        }
                        // Written out by the fill (the block holding a split included).
                        _ => {
                            let at = (rb * ROWS + r) * stride + kb * K;
                            a.copy_from_slice(&s[at..at + K]);
                        }
                    }
                }
            }
            for (c, kc) in kblk.chunks_exact(K).enumerate() {
                for (a, qv) in acc.iter_mut().zip(qr.map(|row| row[c])) {
                    for (x, &kv) in a.iter_mut().zip(kc) {
                        *x = M::madd(qv, kv, *x);
                    }
                }
            }
            for (r, a) in acc.iter().enumerate() {
                let at = (rb * ROWS + r) * stride + kb * K;
                s[at..at + K].copy_from_slice(a);
            }
            if let Some(max) = max.as_deref_mut() {
                for (m, a) in max[rb * ROWS..].iter_mut().zip(&acc) {
                    *m = a.iter().fold(*m, |m, &x| if x > m { x } else { m });
                }
            }
        }
    }
}

/// `acc[r, :] += Σ_t p[r, t]·v[t, :]` for `rows` rows; `p[r, t]` is `p[r·stride.0 + t·stride.1]`
/// (so a transposed `p` needs no copy), `v` is
/// `[keys, d]` row-major, `acc` is `[rows, d]`. With `limit`, row `r`'s weights past its
/// first `limit[r]` are zero and a block of rows stops at the largest of its limits.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn weighted_values<M: Madd>(
    p: &[f32],
    stride: (usize, usize),
    rows: usize,
    limit: Option<&[usize]>,
    v: &[f32],
    keys: usize,
    d: usize,
    acc: &mut [f32],
) {
    let done = match M::LANES {
        16 if d.is_multiple_of(64) => pulp::Arch::new().dispatch(wide::Values::<4, 4, 16> {
            p,
            stride,
            rows,
            limit,
            v,
            keys,
            d,
            acc: &mut *acc,
        }),
        16 if d.is_multiple_of(32) => pulp::Arch::new().dispatch(wide::Values::<8, 2, 16> {
            p,
            stride,
            rows,
            limit,
            v,
            keys,
            d,
            acc: &mut *acc,
        }),
        // 6 × 16 under AVX2: 12 accumulators, two value vectors and the broadcast weight
        // fill 15 of its 16 registers, and each value vector loaded serves 6 rows (measured
        // against 4 × 16 and 2 × 32 on Zen 3, one thread, 2 048 tokens: 9 % and 20 % faster).
        8 if d.is_multiple_of(16) => pulp::Arch::new().dispatch(wide::Values::<6, 2, 8> {
            p,
            stride,
            rows,
            limit,
            v,
            keys,
            d,
            acc: &mut *acc,
        }),
        _ => false,
    };
    if !done {
        // The plain path, other head dimensions, and 8-lane kernels on narrower vectors.
        values_scalar::<M>(p, stride, rows, limit, v, keys, d, acc);
    }
}

/// [`weighted_values`] with a [`ROWS`] × [`DIMS`] block of scalars: the plain path's loops,
/// and the twin the explicit vector blocks are tested against.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn values_scalar<M: Madd>(
    p: &[f32],
    stride: (usize, usize),
    rows: usize,
    limit: Option<&[usize]>,
    v: &[f32],
    keys: usize,
    d: usize,
    acc: &mut [f32],
) {
    let full = d / DIMS * DIMS;
    let all = keys;
    for r0 in (0..rows).step_by(ROWS) {
        let nr = ROWS.min(rows - r0);
        let keys = wide::block_limit(limit, r0, ROWS, rows).map_or(all, |k| k.min(all));
        for c0 in (0..full).step_by(DIMS) {
            let mut a = [[0f32; DIMS]; ROWS];
            if nr == ROWS {
                // The common case, with the row count known to the compiler.
                for t in 0..keys {
                    let vt = &v[t * d + c0..t * d + c0 + DIMS];
                    for (r, ar) in a.iter_mut().enumerate() {
                        let w = p[(r0 + r) * stride.0 + t * stride.1];
                        for (x, &vv) in ar.iter_mut().zip(vt) {
                            *x = M::madd(w, vv, *x);
                        }
                    }
                }
            } else {
                for t in 0..keys {
                    let vt = &v[t * d + c0..t * d + c0 + DIMS];
                    for (r, ar) in a.iter_mut().enumerate().take(nr) {
                        let w = p[(r0 + r) * stride.0 + t * stride.1];
                        for (x, &vv) in ar.iter_mut().zip(vt) {
                            *x = M::madd(w, vv, *x);
                        }
                    }
                }
            }
            for (r, ar) in a.iter().enumerate().take(nr) {
                let dst = &mut acc[(r0 + r) * d + c0..(r0 + r) * d + c0 + DIMS];
                for (x, y) in dst.iter_mut().zip(ar) {
                    *x += y;
                }
            }
        }
        if full < d {
            for r in r0..r0 + nr {
                for t in 0..keys {
                    let w = p[r * stride.0 + t * stride.1];
                    for c in full..d {
                        acc[r * d + c] = M::madd(w, v[t * d + c], acc[r * d + c]);
                    }
                }
            }
        }
    }
}

/// Running maxima and partial sums of [`max`] and [`exp_sum`]: 16, so that their loops
/// vectorise to one AVX-512 vector (two AVX2 ones). With 8 the forward's exponentials were
/// compiled 8 wide under AVX-512 (`ymm`, read off the disassembly), half the width of the
/// backward's.
const PARTIALS: usize = 16;

/// The largest of `row[..vis]` (`vis ≥ 1`; [`PARTIALS`] running maxima so it vectorises).
/// `row` may run on past `vis` (a tile row's padding, any value, NaN included): the last
/// partial chunk is then read whole with the lanes past `vis` masked out, and the maxima are
/// reduced pairwise — a scalar loop over the tail and a chain of `f32::max` (NaN handling per
/// step) were a tenth of a forward at 128 tokens, where every tile is a diagonal one.
#[inline(always)]
pub(crate) fn max(row: &[f32], vis: usize) -> f32 {
    let mut m = [f32::NEG_INFINITY; PARTIALS];
    let full = vis / PARTIALS * PARTIALS;
    for c in row[..full].chunks_exact(PARTIALS) {
        for (a, &b) in m.iter_mut().zip(c) {
            *a = if b > *a { b } else { *a };
        }
    }
    if let Some(c) = row.get(full..full + PARTIALS).filter(|_| full < vis) {
        for (l, (a, &b)) in m.iter_mut().zip(c).enumerate() {
            let b = if full + l < vis { b } else { f32::NEG_INFINITY };
            *a = if b > *a { b } else { *a };
        }
    } else {
        for &b in &row[full..vis] {
            m[0] = if b > m[0] { b } else { m[0] };
        }
    }
    let mut width = PARTIALS / 2;
    while width > 0 {
        for l in 0..width {
            m[l] = if m[l + width] > m[l] {
                m[l + width]
            } else {
                m[l]
            };
        }
        width /= 2;
    }
    m[0]
}

/// Replaces every `x` of `row[..vis]` by `e^{x − shift}` and returns their sum ([`PARTIALS`]
/// partial sums). Where `row` runs on past `vis`, the last partial chunk is taken whole and its
/// lanes past `vis` set to 0 (their exponentials discarded), as [`max`] does.
#[inline(always)]
pub(crate) fn exp_sum<M: Madd>(row: &mut [f32], vis: usize, shift: f32) -> f32 {
    let mut s = [0f32; PARTIALS];
    let full = vis / PARTIALS * PARTIALS;
    for c in row[..full].chunks_exact_mut(PARTIALS) {
        for (a, v) in s.iter_mut().zip(c.iter_mut()) {
            *v = exp::<M>(*v - shift);
            *a += *v;
        }
    }
    let mut tail = 0.0;
    if let Some(c) = row.get_mut(full..full + PARTIALS).filter(|_| full < vis) {
        for (l, (a, v)) in s.iter_mut().zip(c.iter_mut()).enumerate() {
            let e = exp::<M>(*v - shift);
            *v = if full + l < vis { e } else { 0.0 };
            *a += *v;
        }
    } else {
        for v in &mut row[full..vis] {
            *v = exp::<M>(*v - shift);
            tail += *v;
        }
    }
    s.iter().sum::<f32>() + tail
}
