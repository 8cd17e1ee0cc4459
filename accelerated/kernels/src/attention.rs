//! Fused causal attention with the bias computed per tile: softmax(q·kᵀ/√d + b)·v, tiled with
//! an online softmax (flash-attention style), so neither the `[H, N, N]` bias nor the
//! `[H, N, N]` scores ever exist. Peak memory beyond q, k, v and the output is the bias plan
//! (O(N) for FIRE, O(N·H) for a tabulated baseline), one packed copy of k (each head's keys
//! laid out for the score product once, not once per query tile), a copy of v where the
//! caller's starts off a cache line (the crate's `aligned` module) and O(tile²) scratch per thread.
//!
//! Layout: `q: [H, Nq, d]`, `k, v: [H, Nk, d]`, output `[H, Nq, d]`, all row-major f32 (what a
//! candle `[B, H, N, d]` tensor is per batch row after `.contiguous()`). Query positions are
//! arbitrary; key positions must be non-decreasing (a KV cache is). The causal mask is by
//! position: key `j` is visible to query `i` iff `j ≤ i`, and every query must see a key.
//! Work is split over heads × query tiles with rayon.
//!
//! spec: [attn.logits], [attn.causal]

use std::cell::Cell;

use fire_vocabulary::Position;
use rayon::prelude::*;

use crate::aligned::{aligned, AlignedVec};
use crate::error::{shape, Error, Result};
use crate::inner::{self, Start, ROWS};
use crate::simd::{self, Kernel, Madd};
use crate::tile::{self, check_positions, AffineRow, BiasPlan, TileBias};

/// Query rows per tile of the forward. Measured on AVX-512 (Sapphire Rapids, one thread,
/// 4 heads × 4 096 × 64, min of 5, the kernel of an earlier round): 64 × 64 tiles 0.123 s,
/// 128 × 128 0.106 s, 256 × 128 0.102 s. Larger tiles spread the per-tile work (the online
/// softmax's rescaling, the loop set-up, the bias plan's per-row bookkeeping) over more pairs;
/// 128 rows keep heads × tiles enough parallel tasks at a few thousand tokens.
pub const TILE_Q: usize = 128;
/// Keys per tile of the forward. Measured on AVX-512 (Zen 5, two threads, 12 heads × 64, the
/// key widths alternating in one process, median of paired runs against 128): NoPE 0.95× at
/// 2 048 tokens and 0.93–0.95× at 8 192 with 512 keys, FIRE's cost over NoPE 10–11 % → 5–8 %
/// (FIRE's plan does its per-row work once per row and tile: a quarter as often); 1 024 and
/// 2 048 keys no better. A tile of scores is then 256 KiB, inside the L2 cache of current
/// x86 cores (1–2 MiB). (On Sapphire Rapids with an earlier kernel, 128 × 256 tiles had been
/// 0.125 s against 0.106 s; not measured there since.)
pub const TILE_K: usize = 512;

/// The sizes of one attention call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// `H`.
    pub heads: usize,
    /// `Nq`.
    pub queries: usize,
    /// `Nk`.
    pub keys: usize,
    /// `d`.
    pub head_dim: usize,
}

impl Shape {
    /// Checks the three buffers against the shape: no size is zero, `q` is `[H, Nq, d]`, `k`
    /// and `v` are `[H, Nk, d]`.
    pub fn check_buffers(&self, q: &[f32], k: &[f32], v: &[f32]) -> Result<()> {
        let Shape {
            heads,
            queries: nq,
            keys: nk,
            head_dim: d,
        } = *self;
        if heads == 0 || nq == 0 || nk == 0 || d == 0 {
            return Err(Error::Empty {
                what: format!("attention shape {self:?}"),
            });
        }
        for (what, buf, rows) in [
            ("q [H, Nq, d]", q, nq),
            ("k [H, Nk, d]", k, nk),
            ("v [H, Nk, d]", v, nk),
        ] {
            if buf.len() != heads * rows * d {
                return Err(shape(what, heads * rows * d, buf.len()));
            }
        }
        Ok(())
    }

    /// [`Self::check_buffers`], then the position lists: one per query and key row, valid
    /// (positions past 2^53 and unsorted keys are refused), and every query sees a key
    /// (spec: [attn.causal]).
    pub fn check(
        &self,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        queries: &[Position],
        keys: &[Position],
    ) -> Result<()> {
        self.checked(q, k, v, queries, keys).map(|_| ())
    }

    /// [`Self::check`], returning whether the keys are consecutive positions (what
    /// [`check_positions`] finds on its way; the kernels' visible prefixes are then arithmetic).
    pub(crate) fn checked(
        &self,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        queries: &[Position],
        keys: &[Position],
    ) -> Result<bool> {
        self.check_buffers(q, k, v)?;
        let (nq, nk) = (self.queries, self.keys);
        if queries.len() != nq {
            return Err(shape("query positions", nq, queries.len()));
        }
        if keys.len() != nk {
            return Err(shape("key positions", nk, keys.len()));
        }
        let contiguous = check_positions(queries, keys)?;
        if let Some(&i) = queries.iter().find(|&&i| i < keys[0]) {
            return Err(Error::Invalid {
                what: "causal attention".into(),
                reason: format!("query position {i} sees no key (every key is after it)"),
            });
        }
        Ok(contiguous)
    }
}

/// Fused causal attention with `encoding`'s bias (`None`: no bias at all, the NoPE fast
/// path). Builds the encoding's plan for these positions, then runs [`fused_causal`].
pub fn attend(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    shape: Shape,
    queries: &[Position],
    keys: &[Position],
    encoding: Option<&dyn TileBias>,
) -> Result<Vec<f32>> {
    match encoding {
        Some(e) => {
            if e.heads() != shape.heads {
                return Err(crate::error::shape(
                    "encoding heads",
                    shape.heads,
                    e.heads(),
                ));
            }
            let plan = e.plan(queries, keys)?;
            fused_causal(q, k, v, shape, queries, keys, Some(plan.as_ref()))
        }
        None => fused_causal(q, k, v, shape, queries, keys, None),
    }
}

/// One decoding step: a single new query at position `query` against the KV cache
/// (`k, v: [H, Nk, d]`, positions `keys`). `q` is `[H, d]`; the output is `[H, d]`. The bias
/// of the row costs O(Nk·H) (FIRE: one normaliser, one threshold search per breakpoint, then
/// a multiply-add per key and head).
pub fn decode(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    heads: usize,
    query: Position,
    keys: &[Position],
    encoding: Option<&dyn TileBias>,
) -> Result<Vec<f32>> {
    let d = q.len().checked_div(heads).unwrap_or(0);
    let shape = Shape {
        heads,
        queries: 1,
        keys: keys.len(),
        head_dim: d,
    };
    attend(q, k, v, shape, &[query], keys, encoding)
}

/// Fused causal attention with a prepared bias plan (share one plan across layers for
/// FIRE-S). Returns `[H, Nq, d]`.
pub fn fused_causal(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    shape: Shape,
    queries: &[Position],
    keys: &[Position],
    bias: Option<&dyn BiasPlan>,
) -> Result<Vec<f32>> {
    fused_causal_lse(q, k, v, shape, queries, keys, bias).map(|(out, _)| out)
}

/// [`fused_causal`] that also returns each row's log-sum-exp of its (scaled, biased) scores,
/// `[H, Nq]`: what the backward pass ([`crate::backward`]) needs to recompute the softmax
/// tile by tile without storing it.
pub fn fused_causal_lse(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    shape: Shape,
    queries: &[Position],
    keys: &[Position],
    bias: Option<&dyn BiasPlan>,
) -> Result<(Vec<f32>, Vec<f32>)> {
    fused_causal_lse_batch(1, q, k, v, shape, queries, keys, bias)
}

/// [`fused_causal_lse`] over `batch` rows at once: `q: [B, H, Nq, d]`, `k, v: [B, H, Nk, d]`;
/// returns `[B, H, Nq, d]` and `[B, H, Nq]`. Every row shares the positions and the plan (a
/// training batch); one call spreads all rows' heads and query tiles over the threads, where
/// a call per row would wait for its slowest tile `B` times.
#[allow(clippy::too_many_arguments)]
pub fn fused_causal_lse_batch(
    batch: usize,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    shape: Shape,
    queries: &[Position],
    keys: &[Position],
    bias: Option<&dyn BiasPlan>,
) -> Result<(Vec<f32>, Vec<f32>)> {
    let Shape {
        heads,
        queries: nq,
        keys: nk,
        head_dim: d,
    } = shape;
    if batch == 0 {
        return Err(crate::error::shape("batch", ">0", 0));
    }
    let (pq, pk) = (heads * nq * d, heads * nk * d);
    for (what, buf, per) in [("q", q, pq), ("k", k, pk), ("v", v, pk)] {
        if buf.len() != batch * per {
            return Err(crate::error::shape(what, batch * per, buf.len()));
        }
    }
    // The checks of one row (sizes, positions, causal visibility) hold for every row.
    let contiguous = shape.checked(&q[..pq], &k[..pk], &v[..pk], queries, keys)?;
    // Every query tile of a head reads the same keys: packed once per head for the score
    // product, in the blocks of the SIMD path this machine takes, with the scores' 1/√d.
    let block = simd::dispatch(KeyBlock);
    let head_packed = inner::packed_len(nk, d, block);
    let scale = score_scale(d);
    // On cache lines, as the products read them in whole vectors ([`crate::aligned`]): the
    // packed keys, and the values (copied if the caller's are not).
    let mut kp = AlignedVec::zeroed(batch * heads * head_packed);
    let v = aligned(v, nk * d);
    kp.par_chunks_mut(head_packed)
        .zip(k.par_chunks(nk * d))
        .for_each(|(dst, src)| {
            simd::dispatch(inner::PackInto {
                src,
                n: nk,
                d,
                block,
                scale,
                dst,
            })
        });
    let mut out = vec![0f32; q.len()];
    let mut lse = vec![0f32; batch * heads * nq];
    out.par_chunks_mut(nq * d)
        .zip(lse.par_chunks_mut(nq))
        .enumerate()
        .for_each(|(bh, (out_h, lse_h))| {
            let qh = &q[bh * nq * d..(bh + 1) * nq * d];
            let kh = &k[bh * nk * d..(bh + 1) * nk * d];
            let vh = &v[bh * nk * d..(bh + 1) * nk * d];
            let kph = &kp[bh * head_packed..(bh + 1) * head_packed];
            out_h
                .par_chunks_mut(TILE_Q * d)
                .zip(lse_h.par_chunks_mut(TILE_Q))
                .enumerate()
                .for_each(|(t, (out_t, lse_t))| {
                    let r0 = t * TILE_Q;
                    let rows = out_t.len() / d;
                    let task = Task {
                        head: bh % heads,
                        q: &qh[r0 * d..(r0 + rows) * d],
                        k: kh,
                        packed: (kph, block),
                        v: vh,
                        d,
                        queries: &queries[r0..r0 + rows],
                        first_row: r0,
                        keys,
                        contiguous,
                        bias,
                    };
                    task.run(out_t, lse_t);
                });
        });
    Ok((out, lse))
}

/// Keys per pass of the forward's value product under AVX2: a pass's values (16 KiB at 64
/// keys × 64 dims) stay in the L1 cache while every row block of the tile reads them, where
/// one pass over the tile's 512 keys read each row block's values from L2 (measured on Zen 3,
/// 12 heads × 64, the variants alternating in one process, medians: with 6 × 16 value blocks
/// 5 % faster at 8 192 tokens on two threads, the same at 2 048 on one; with 4 × 16 blocks 7 %
/// faster at 2 048, 32 and 128 keys less so). Under AVX-512 the tile is one pass, as measured
/// there.
const VALUE_KEYS: usize = 64;

/// The scores' scale 1/√d, applied to the packed keys: `q·(k/√d)`, in this order in the
/// forward and in the backward's recomputation alike (so the two agree bit for bit).
pub(crate) fn score_scale(d: usize) -> f32 {
    1.0 / (d as f32).sqrt()
}

/// The keys per block of the score product on the path [`simd::dispatch`] takes.
struct KeyBlock;

impl Kernel for KeyBlock {
    type Output = usize;
    #[inline(always)]
    fn run<M: Madd>(self) -> usize {
        inner::keys::<M>()
    }
}

/// One head × one query tile.
struct Task<'a> {
    head: usize,
    q: &'a [f32],
    k: &'a [f32],
    /// The head's keys packed in blocks of `.1` keys ([`inner::pack`]).
    packed: (&'a [f32], usize),
    v: &'a [f32],
    d: usize,
    queries: &'a [Position],
    first_row: usize,
    keys: &'a [Position],
    /// Whether `keys` are consecutive positions ([`Shape::checked`]): each row's visible
    /// prefix is then arithmetic, not a search.
    contiguous: bool,
    bias: Option<&'a dyn BiasPlan>,
}

/// [`Task::run_with`] as a [`Kernel`] for the SIMD dispatch.
struct TaskRun<'a, 'b> {
    task: &'a Task<'b>,
    out: &'a mut [f32],
    lse: &'a mut [f32],
}

impl Kernel for TaskRun<'_, '_> {
    type Output = ();
    #[inline(always)]
    fn run<M: Madd>(self) {
        self.task.run_with::<M>(self.out, self.lse);
    }
}

impl Task<'_> {
    fn run(&self, out: &mut [f32], lse: &mut [f32]) {
        simd::dispatch(TaskRun {
            task: self,
            out,
            lse,
        });
    }

    #[inline(always)]
    fn run_with<M: Madd>(&self, out: &mut [f32], lse: &mut [f32]) {
        let d = self.d;
        let rows = self.queries.len();
        let scale = score_scale(d);
        let mut buffers = BUFFERS.with(Cell::take);
        let Buffers {
            visible,
            s,
            tile_max,
            affine,
            lim,
            max,
            sum,
            clim,
        } = &mut buffers;
        // Keys visible to each row form a prefix of the (non-decreasing) key list.
        visible.clear();
        let cols = 0..self.keys.len();
        visible.extend(
            self.queries
                .iter()
                .map(|&i| tile::visible(self.keys, &cols, i, self.contiguous)),
        );
        let end = visible.iter().copied().max().unwrap_or(0);
        let rows_padded = rows.div_ceil(ROWS) * ROWS;
        let block = inner::keys::<M>();
        let mut own = Vec::new();
        let kp = if self.packed.1 == block {
            self.packed.0
        } else {
            // The dispatch changed path since the keys were packed (`force_plain_path`).
            inner::pack(self.k, self.keys.len(), d, block, scale, &mut own);
            &own
        };
        max.clear();
        max.resize(rows, f32::NEG_INFINITY);
        sum.clear();
        sum.resize(rows, 0.0);
        // `out` arrives zeroed, but the pass stays: it brings the tile's output rows into the
        // cache (and faults their pages in) before the products accumulate into them
        // (measured without it: the forward 1.10x slower, 512 x 32 x 32, one thread, median
        // of 60 paired runs).
        out.fill(0.0);
        // With queries in increasing order (the usual case) the rows that see no key of a
        // tile form a prefix of the query tile: its row blocks are skipped, which keeps the
        // causal waste of a tall query tile to under one row block per key tile.
        let sorted = visible.windows(2).all(|w| w[0] <= w[1]);
        for c0 in (0..end).step_by(TILE_K) {
            let cols = TILE_K.min(end - c0);
            let stride = cols.div_ceil(block) * block;
            let first = if sorted {
                visible.partition_point(|&v| v <= c0) / ROWS * ROWS
            } else {
                0
            };
            // Not cleared: the bias fill and the score product write every entry read below
            // (rows `first..rows`, columns `..vis`; the rest of a row is zeroed).
            s.resize((rows_padded - first) * stride, 0.0);
            affine.resize(rows - first, None);
            let table = match self.bias {
                Some(plan) => {
                    let r = self.first_row + first..self.first_row + rows;
                    plan.fill_causal_affine(self.head, r, c0..c0 + cols, s, stride, affine)
                }
                None => &[],
            };
            let kt = &kp[c0 * d..(c0 + stride) * d];
            // Where every row sees the whole tile and no column is padding, the product
            // hands over the rows' maxima; elsewhere they are taken over the visible part.
            let whole = sorted && cols == stride && visible[first] >= c0 + cols;
            tile_max.resize(rows_padded - first, 0.0);
            let tmax = whole.then_some(&mut tile_max[..]);
            let q = &self.q[first * d..];
            let start = match self.bias {
                Some(_) => Start::Bias { table, affine },
                None => Start::Zero,
            };
            // Each row's visible prefix of the tile: the products skip what no row of a block
            // sees (the causal diagonal's upper half).
            lim.clear();
            lim.extend((first..rows).map(|r| visible[r].saturating_sub(c0).min(cols)));
            inner::scores::<M>(q, rows - first, kt, d, s, start, Some(lim), tmax);
            for r in first..rows {
                let vis = lim[r - first];
                let row = &mut s[(r - first) * stride..(r - first + 1) * stride];
                if vis == 0 {
                    row.fill(0.0);
                    continue;
                }
                let tile = if whole {
                    tile_max[r - first]
                } else {
                    inner::max(row, vis)
                };
                let m = max[r].max(tile);
                let alpha = if max[r] == f32::NEG_INFINITY {
                    0.0
                } else {
                    inner::exp::<M>(max[r] - m)
                };
                let total = inner::exp_sum::<M>(row, vis, m);
                row[vis..].fill(0.0);
                sum[r] = sum[r] * alpha + total;
                max[r] = m;
                if alpha != 1.0 {
                    out[r * d..(r + 1) * d].iter_mut().for_each(|x| *x *= alpha);
                }
            }
            let chunk = if M::LANES == 8 { VALUE_KEYS } else { cols };
            for k0 in (0..cols).step_by(chunk) {
                let kn = chunk.min(cols - k0);
                clim.clear();
                clim.extend(lim.iter().map(|&l| l.saturating_sub(k0).min(kn)));
                let v = &self.v[(c0 + k0) * d..(c0 + k0 + kn) * d];
                inner::weighted_values::<M>(
                    &s[k0..],
                    (stride, 1),
                    rows - first,
                    Some(clim),
                    v,
                    kn,
                    d,
                    &mut out[first * d..],
                );
            }
        }
        for ((row, &l), (lse, &m)) in out
            .chunks_exact_mut(d)
            .zip(sum.iter())
            .zip(lse.iter_mut().zip(max.iter()))
        {
            let inv = 1.0 / l;
            row.iter_mut().for_each(|x| *x *= inv);
            *lse = m + l.ln();
        }
        BUFFERS.with(|cell| cell.set(buffers));
    }
}

/// A forward task's working buffers, kept per thread from task to task: taken fresh, the tile
/// of scores (64 KiB at 128 × 128) was zeroed by `resize` in every task, and at short
/// sequences, where a task is one or two tiles, that memset and the allocations were a tenth
/// of the forward (128 tokens × 64 heads × 32, one thread).
#[derive(Default)]
struct Buffers {
    visible: Vec<usize>,
    /// The tile of scores, on a cache line ([`crate::aligned`]).
    s: AlignedVec,
    tile_max: Vec<f32>,
    affine: Vec<Option<AffineRow>>,
    lim: Vec<usize>,
    max: Vec<f32>,
    sum: Vec<f32>,
    /// `lim` within one pass of the value product ([`VALUE_KEYS`]).
    clim: Vec<usize>,
}

thread_local! {
    static BUFFERS: Cell<Buffers> = Cell::new(Buffers::default());
}
