//! The backward pass of the fused attention with an on-the-fly bias: the training half of
//! [`crate::attention`], so a training step at long length never holds an `[H, N, N]`
//! tensor either.
//!
//! Flash-attention's recomputation: the forward keeps only the output `o` and each row's
//! log-sum-exp `ℓ_i` ([`crate::attention::fused_causal_lse`]); the backward walks the same
//! tiles again, rebuilds the scores `s = q·kᵀ/√d + b` (the bias filled by the same plan, so
//! bit-identical to the forward's) and `p = exp(s − ℓ_i)`, and forms
//!
//! ```text
//! D_i = Σ_c dO[i, c]·O[i, c],   dP = dO·vᵀ,   dS = p ⊙ (dP − D_i),
//! dv += pᵀ·dO,   dq += dS·k/√d,   dk += dSᵀ·q/√d,   d(bias) = dS.
//! ```
//!
//! `dS` is exactly the gradient with respect to the bias entry, so an encoding's parameters get
//! their gradient from the tiles of `dS` as they pass ([`GradPlan::accumulate`]): FIRE sums
//! them per segment of its compiled f_θ (two numbers per segment and head, then one
//! backpropagation per segment: [`crate::fire_grad`]), a distance table per distance. Memory
//! beyond the inputs and gradients: per task, packed copies of its head's k and v (and of its
//! q, k and dO where the caller's start off a cache line: the crate's `aligned` module), O(tile²)
//! scratch and one statistics vector.
//!
//! Work is split over batch rows × heads (each task owns its head's `dq`, `dk`, `dv`), with the
//! query tiles of a head in sequence. Positions: queries and keys as in the forward (keys
//! non-decreasing); training uses `0..N` for both.
//!
//! spec: [attn.logits], [attn.causal], [grad.vjp]

use std::ops::Range;

use rayon::prelude::*;

use fire_vocabulary::Position;

use crate::aligned::{aligned, AlignedVec};
use crate::attention::Shape;
use crate::error::{shape, Result};
use crate::inner::{self, Start, ROWS};
use crate::simd::{self, Kernel, Madd};
use crate::tile::BiasPlan;

/// Query rows per tile of the backward: its time was flat from 64 × 64 to 64 × 128 tiles and
/// 5–15% longer with 128 or 256 rows (measured as the forward's [`crate::attention::TILE_Q`]).
const TILE_Q: usize = 64;
/// Keys per tile of the backward.
const TILE_K: usize = 64;
/// Floats a key block of the backward's sweep holds: its packed keys and values and its rows of
/// `dk` and `dv`, `4 · keys · d` of them ([`key_block`]).
const KEY_BLOCK_FLOATS: usize = 128 * 1024;

/// Keys per block of the backward's sweep at head dimension `d`, a multiple of [`TILE_K`]: every
/// query tile meets a block before the next, so the block's packed keys and values and its rows
/// of `dk` and `dv` (512 KiB: in a core's L2, or next to it in L3) stay cached while the query
/// tiles pass, where sweeping all the keys per query tile streams four head-sized arrays per
/// tile once they outgrow the cache (8 MiB a head at N = 8 192, d = 64). Measured at N = 8 192
/// on Zen 3 (2 threads): the backward 0.90x the unblocked sweep's time with blocks of 256
/// keys, ~0.85x with 512 or 1 024, worse again with 2 048; flat at N = 2 048. The sums keep
/// their order (dq's over keys, dk's and dv's over queries), so dq, dk and dv are
/// bit-identical to the unblocked sweep's; only the f64 statistics of the bias's parameters
/// add in another order.
pub(crate) fn key_block(d: usize) -> usize {
    (KEY_BLOCK_FLOATS / (4 * d.max(1)) / TILE_K).max(1) * TILE_K
}

/// A bias plan whose parameters are trained through the fused kernel.
pub trait GradPlan: BiasPlan {
    /// The plan as a forward bias source.
    fn as_bias(&self) -> &dyn BiasPlan;

    /// The length of the statistics vector [`Self::accumulate`] adds into.
    fn stats_len(&self) -> usize;

    /// Adds head `head`'s tile of `dS` (`rows × cols`, row-major with row stride `stride`) into
    /// `stats`. Entries whose key is after the query are zero in causal attention; a plan still
    /// honours nonzero ones (as a cotangent may set them), so it is a whole vector-Jacobian
    /// product of the bias.
    fn accumulate(
        &self,
        head: usize,
        rows: Range<usize>,
        cols: Range<usize>,
        ds: &[f32],
        stride: usize,
        stats: &mut [f64],
    );

    /// The gradient with respect to the source's parameters, in its packed order, from the
    /// statistics summed over every tile.
    fn gradient(&self, stats: &[f64]) -> Result<Vec<f64>>;
}

/// A plan's [`GradPlan::accumulate`] as loops for [`dispatch_accumulate`] to compile at the
/// CPU's width: `accumulate_rows` must be `#[inline(always)]`.
pub(crate) trait AccumulateRows: Sync {
    /// The sums of [`GradPlan::accumulate`], with `M`'s multiply-adds.
    fn accumulate_rows<M: Madd>(
        &self,
        head: usize,
        rows: Range<usize>,
        cols: Range<usize>,
        ds: &[f32],
        stride: usize,
        stats: &mut [f64],
    );
}

/// Runs `plan.accumulate_rows` under [`simd::dispatch`]. A plan is called through
/// `dyn GradPlan`, outside the kernel's own dispatch: without one here its loops would be
/// compiled for the baseline target.
pub(crate) fn dispatch_accumulate<P: AccumulateRows>(
    plan: &P,
    head: usize,
    rows: Range<usize>,
    cols: Range<usize>,
    ds: &[f32],
    stride: usize,
    stats: &mut [f64],
) {
    struct Run<'a, P> {
        plan: &'a P,
        head: usize,
        rows: Range<usize>,
        cols: Range<usize>,
        ds: &'a [f32],
        stride: usize,
        stats: &'a mut [f64],
    }
    impl<P: AccumulateRows> Kernel for Run<'_, P> {
        type Output = ();
        #[inline(always)]
        fn run<M: Madd>(self) {
            let Run {
                plan,
                head,
                rows,
                cols,
                ds,
                stride,
                stats,
            } = self;
            plan.accumulate_rows::<M>(head, rows, cols, ds, stride, stats);
        }
    }
    simd::dispatch(Run {
        plan,
        head,
        rows,
        cols,
        ds,
        stride,
        stats,
    });
}

/// The gradients of one backward call.
#[derive(Debug, Clone, PartialEq)]
pub struct Gradients {
    /// `[B, H, Nq, d]`.
    pub dq: Vec<f32>,
    /// `[B, H, Nk, d]`.
    pub dk: Vec<f32>,
    /// `[B, H, Nk, d]`.
    pub dv: Vec<f32>,
    /// The bias source's parameter gradient (empty without a bias).
    pub dparams: Vec<f64>,
}

/// The backward pass for `batch` rows of [`crate::attention::fused_causal_lse`]: `q`,
/// `out`, `dout`: `[B, H, Nq, d]`; `k`, `v`: `[B, H, Nk, d]`; `lse`: `[B, H, Nq]`, all as the
/// forward saw and returned them. The same plan must serve every batch row (the positions are
/// shared).
#[allow(clippy::too_many_arguments)]
pub fn fused_causal_backward(
    batch: usize,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &[f32],
    lse: &[f32],
    dout: &[f32],
    shape_: Shape,
    queries: &[Position],
    keys: &[Position],
    bias: Option<&dyn GradPlan>,
) -> Result<Gradients> {
    let inputs = BackwardInputs {
        batch,
        q,
        k,
        v,
        out,
        lse,
        dout,
        shape: shape_,
        queries,
        keys,
        bias,
    };
    let (tasks, dparams) = backward_tasks(&inputs)?;
    let (pq, pk) = (
        shape_.heads * shape_.queries * shape_.head_dim,
        shape_.heads * shape_.keys * shape_.head_dim,
    );
    let mut grads = Gradients {
        dq: Vec::with_capacity(batch * pq),
        dk: Vec::with_capacity(batch * pk),
        dv: Vec::with_capacity(batch * pk),
        dparams,
    };
    for (dq, dk, dv) in tasks {
        grads.dq.extend_from_slice(&dq);
        grads.dk.extend_from_slice(&dk);
        grads.dv.extend_from_slice(&dv);
    }
    Ok(grads)
}

/// One backward call's inputs, as [`fused_causal_backward`] takes them (the same layouts).
#[derive(Clone, Copy)]
pub struct BackwardInputs<'a> {
    /// `B`.
    pub batch: usize,
    /// `[B, H, Nq, d]`.
    pub q: &'a [f32],
    /// `[B, H, Nk, d]`.
    pub k: &'a [f32],
    /// `[B, H, Nk, d]`.
    pub v: &'a [f32],
    /// The forward's output, `[B, H, Nq, d]`.
    pub out: &'a [f32],
    /// The forward's log-sum-exp, `[B, H, Nq]`.
    pub lse: &'a [f32],
    /// The output's cotangent, `[B, H, Nq, d]`.
    pub dout: &'a [f32],
    /// The sizes of one batch row.
    pub shape: Shape,
    /// Query positions (shared by the batch rows).
    pub queries: &'a [Position],
    /// Key positions (shared by the batch rows).
    pub keys: &'a [Position],
    /// The bias's plan, if any.
    pub bias: Option<&'a dyn GradPlan>,
}

impl std::fmt::Debug for BackwardInputs<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackwardInputs")
            .field("batch", &self.batch)
            .field("shape", &self.shape)
            .field("bias", &self.bias.is_some())
            .finish_non_exhaustive()
    }
}

/// Where [`fused_causal_backward_into_rows`] writes `dq`, `dk`, `dv`: rows of `width` values,
/// one per batch row and position (`[B·N, width]`, row-major), each gradient's heads merged
/// (`[H·d]`, head `h` at columns `h·d..(h + 1)·d`) from its column in `offsets` — the layout
/// of a fused `q, k, v` projection's output, `[B·N, 3·H·d]` with offsets `0, H·d, 2·H·d`.
#[derive(Debug)]
pub struct MergedRows<'a> {
    /// `[B·N, width]`.
    pub rows: &'a mut [f32],
    /// Values per row.
    pub width: usize,
    /// The first column of `dq`, `dk` and `dv`.
    pub offsets: [usize; 3],
}

/// [`fused_causal_backward`] for self-attention (as many queries as keys), writing `dq`, `dk`,
/// `dv` straight into rows with the heads merged ([`MergedRows`]) instead of returning them
/// as `[B, H, N, d]` buffers; returns the bias's parameter gradient. What a Transformer block
/// does next with the three gradients is a product with its fused projection, which wants
/// them side by side in rows: done here in one parallel pass from the tasks' own buffers,
/// where [`fused_causal_backward`] concatenates them on one thread and the caller then copies
/// them once more. Entries of `rows` outside the three gradients' columns are left as they
/// are.
pub fn fused_causal_backward_into_rows(
    inputs: BackwardInputs<'_>,
    dst: MergedRows<'_>,
) -> Result<Vec<f64>> {
    let BackwardInputs {
        batch,
        shape: shape_,
        ..
    } = inputs;
    let Shape {
        heads,
        queries: nq,
        keys: nk,
        head_dim: d,
    } = shape_;
    if nq != nk {
        return Err(shape("keys (merged rows need self-attention)", nq, nk));
    }
    let merged = heads * d;
    if let Some(&o) = dst.offsets.iter().find(|&&o| o + merged > dst.width) {
        return Err(shape(
            "merged rows' width (offset + heads × head dim)",
            o + merged,
            dst.width,
        ));
    }
    if dst.rows.len() != batch * nq * dst.width {
        return Err(shape("merged rows", batch * nq * dst.width, dst.rows.len()));
    }
    let (tasks, dparams) = backward_tasks(&inputs)?;
    let width = dst.width;
    dst.rows
        .par_chunks_mut(nq * width)
        .zip(tasks.par_chunks(heads))
        .for_each(|(rows, tasks)| {
            for (i, row) in rows.chunks_exact_mut(width).enumerate() {
                for (h, (dq, dk, dv)) in tasks.iter().enumerate() {
                    for (&offset, g) in dst.offsets.iter().zip([dq, dk, dv]) {
                        let at = offset + h * d;
                        row[at..at + d].copy_from_slice(&g[i * d..(i + 1) * d]);
                    }
                }
            }
        });
    Ok(dparams)
}

/// The tasks of a backward call, one per batch row × head in that order, each with its own
/// `(dq, dk, dv)` (`[N, d]` each), and the bias's parameter gradient.
fn backward_tasks(inputs: &BackwardInputs<'_>) -> Result<(Vec<TaskGradients>, Vec<f64>)> {
    let BackwardInputs {
        batch,
        shape: shape_,
        queries,
        keys,
        bias,
        ..
    } = *inputs;
    let (q, k, v, out, lse, dout) = (
        inputs.q,
        inputs.k,
        inputs.v,
        inputs.out,
        inputs.lse,
        inputs.dout,
    );
    let Shape {
        heads,
        queries: nq,
        keys: nk,
        head_dim: d,
    } = shape_;
    let (pq, pk) = (heads * nq * d, heads * nk * d);
    if batch == 0 {
        return Err(shape("batch", ">0", 0));
    }
    for (what, buf, per) in [
        ("q", q, pq),
        ("k", k, pk),
        ("v", v, pk),
        ("out", out, pq),
        ("dout", dout, pq),
    ] {
        if buf.len() != batch * per {
            return Err(shape(what, batch * per, buf.len()));
        }
    }
    if lse.len() != batch * heads * nq {
        return Err(shape("lse", batch * heads * nq, lse.len()));
    }
    // The forward's own checks (positions, causal visibility) on the first row.
    let contiguous = shape_.checked(&q[..pq], &k[..pk], &v[..pk], queries, keys)?;
    let stats_len = bias.map_or(0, GradPlan::stats_len);
    let results: Vec<HeadGradients> = (0..batch * heads)
        .into_par_iter()
        .map(|t| {
            let (b, h) = (t / heads, t % heads);
            let qs = (b * heads + h) * nq * d;
            let ks = (b * heads + h) * nk * d;
            let task = HeadTask {
                head: h,
                q: &q[qs..qs + nq * d],
                k: &k[ks..ks + nk * d],
                v: &v[ks..ks + nk * d],
                o: &out[qs..qs + nq * d],
                dout: &dout[qs..qs + nq * d],
                lse: &lse[t * nq..(t + 1) * nq],
                d,
                queries,
                keys,
                contiguous,
                bias,
            };
            task.run(stats_len)
        })
        .collect();
    let mut stats = vec![0f64; stats_len];
    let mut tasks = Vec::with_capacity(results.len());
    for (dq, dk, dv, st) in results {
        stats.iter_mut().zip(&st).for_each(|(a, b)| *a += b);
        tasks.push((dq, dk, dv));
    }
    let dparams = match bias {
        Some(plan) => plan.gradient(&stats)?,
        None => Vec::new(),
    };
    Ok((tasks, dparams))
}

/// One task's `(dq, dk, dv)`.
type TaskGradients = (AlignedVec, AlignedVec, AlignedVec);

/// One task's `(dq, dk, dv, bias statistics)`.
type HeadGradients = (AlignedVec, AlignedVec, AlignedVec, Vec<f64>);

/// One batch row × head.
struct HeadTask<'a> {
    head: usize,
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    o: &'a [f32],
    dout: &'a [f32],
    lse: &'a [f32],
    d: usize,
    queries: &'a [Position],
    keys: &'a [Position],
    /// Whether `keys` are consecutive positions: each row's visible prefix is arithmetic.
    contiguous: bool,
    bias: Option<&'a dyn GradPlan>,
}

/// [`HeadTask::run_with`] as a [`Kernel`] for the SIMD dispatch.
struct HeadRun<'a, 'b> {
    task: &'a HeadTask<'b>,
    stats_len: usize,
}

impl Kernel for HeadRun<'_, '_> {
    type Output = HeadGradients;
    #[inline(always)]
    fn run<M: Madd>(self) -> HeadGradients {
        self.task.run_with::<M>(self.stats_len)
    }
}

impl HeadTask<'_> {
    fn run(&self, stats_len: usize) -> HeadGradients {
        simd::dispatch(HeadRun {
            task: self,
            stats_len,
        })
    }

    #[inline(always)]
    fn run_with<M: Madd>(&self, stats_len: usize) -> HeadGradients {
        let d = self.d;
        let (nq, nk) = (self.queries.len(), self.keys.len());
        let scale = crate::attention::score_scale(d);
        // Everything the products read or write in whole vectors on cache lines
        // ([`crate::aligned`]): the gradients, the packed keys and values, the tiles, and the
        // head's q, k and dO (copied where the caller's are not).
        let mut dq = AlignedVec::zeroed(nq * d);
        let mut dk = AlignedVec::zeroed(nk * d);
        let mut dv = AlignedVec::zeroed(nk * d);
        let (q, k, dout) = (
            aligned(self.q, nq * d),
            aligned(self.k, nk * d),
            aligned(self.dout, nq * d),
        );
        let mut stats = vec![0f64; stats_len];
        // D_i = dO_i · O_i.
        let big_d: Vec<f32> = self
            .dout
            .chunks_exact(d)
            .zip(self.o.chunks_exact(d))
            .map(|(a, b)| a.iter().zip(b).map(|(x, y)| x * y).sum())
            .collect();
        // Every query tile reads the same key and value tiles: packed once per head.
        let block = inner::keys::<M>();
        let packed = inner::packed_len(nk, d, block);
        let (mut kp, mut vp) = (AlignedVec::zeroed(packed), AlignedVec::zeroed(packed));
        // With the scores' 1/√d, as the forward packs them.
        inner::pack_into(&k, nk, d, block, scale, &mut kp);
        inner::pack_into(self.v, nk, d, block, 1.0, &mut vp);
        let (mut s, mut dp) = (AlignedVec::default(), AlignedVec::default());
        let mut affine = Vec::new();
        let mut lim = Vec::new();
        // Each query tile's first row, rows, each row's visible prefix of the keys, and the
        // end of the longest.
        let all = 0..nk;
        let tiles: Vec<(usize, usize, Vec<usize>, usize)> = (0..nq)
            .step_by(TILE_Q)
            .map(|r0| {
                let rows = TILE_Q.min(nq - r0);
                let visible = self.queries[r0..r0 + rows]
                    .iter()
                    .map(|&i| crate::tile::visible(self.keys, &all, i, self.contiguous))
                    .collect::<Vec<usize>>();
                let end = visible.iter().copied().max().unwrap_or(0);
                (r0, rows, visible, end)
            })
            .collect();
        // The keys in blocks, each met by every query tile that sees into it before the next
        // block: the block's packed keys and values and its rows of dk and dv stay cached
        // while the query tiles pass ([`key_block`]).
        let key_block = key_block(d);
        for b0 in (0..nk).step_by(key_block) {
            for (r0, rows, visible, end) in &tiles {
                let (r0, rows, end) = (*r0, *rows, *end);
                if end <= b0 {
                    continue;
                }
                let rows_padded = rows.div_ceil(ROWS) * ROWS;
                affine.resize(rows, None);
                let qrows = &q[r0 * d..(r0 + rows) * d];
                let dorows = &dout[r0 * d..(r0 + rows) * d];
                for c0 in (b0..end.min(b0 + key_block)).step_by(TILE_K) {
                    let cols = TILE_K.min(end - c0);
                    let stride = cols.div_ceil(inner::keys::<M>()) * inner::keys::<M>();
                    let ktile = &k[c0 * d..(c0 + cols) * d];
                    let kt = &kp[c0 * d..(c0 + stride) * d];
                    let vt = &vp[c0 * d..(c0 + stride) * d];
                    // s = q·kᵀ/√d + b, exactly as the forward built it; then p = exp(s − ℓ). Not
                    // cleared: the bias fill and the products write every entry read below (rows
                    // `..rows`, columns `..vis`; the rest of a row is zeroed).
                    s.resize(rows_padded * stride, 0.0);
                    let table = match self.bias {
                        Some(plan) => plan.as_bias().fill_causal_affine(
                            self.head,
                            r0..r0 + rows,
                            c0..c0 + cols,
                            &mut s,
                            stride,
                            &mut affine,
                        ),
                        None => &[],
                    };
                    let start = match self.bias {
                        Some(_) => Start::Bias {
                            table,
                            affine: &affine,
                        },
                        None => Start::Zero,
                    };
                    // Each row's visible prefix of the tile: the products over rows skip what no
                    // row of a block sees.
                    lim.clear();
                    lim.extend(visible.iter().map(|&v| v.saturating_sub(c0).min(cols)));
                    let l = Some(&lim[..]);
                    inner::scores::<M>(qrows, rows, kt, d, &mut s, start, l, None);
                    dp.resize(rows_padded * stride, 0.0);
                    inner::scores::<M>(dorows, rows, vt, d, &mut dp, Start::Zero, l, None);
                    for r in 0..rows {
                        let vis = lim[r];
                        let lse = self.lse[r0 + r];
                        let srow = &mut s[r * stride..(r + 1) * stride];
                        let dprow = &mut dp[r * stride..(r + 1) * stride];
                        for (sv, dv) in srow[..vis].iter_mut().zip(&mut dprow[..vis]) {
                            let p = inner::exp::<M>(*sv - lse);
                            *sv = p;
                            *dv = p * (*dv - big_d[r0 + r]);
                        }
                        srow[vis..].fill(0.0);
                        dprow[vis..].fill(0.0);
                    }
                    // Now `s` holds p and `dp` holds dS.
                    let pv = (stride, 1);
                    inner::weighted_values::<M>(
                        &dp,
                        pv,
                        rows,
                        l,
                        ktile,
                        cols,
                        d,
                        &mut dq[r0 * d..],
                    );
                    // dV += Pᵀ·dO and dK += dSᵀ·q: the same product over the transposed tiles,
                    // read in place through the strides.
                    let pt = (1, stride);
                    let dv_t = &mut dv[c0 * d..];
                    inner::weighted_values::<M>(&s, pt, cols, None, dorows, rows, d, dv_t);
                    let dk_t = &mut dk[c0 * d..];
                    inner::weighted_values::<M>(&dp, pt, cols, None, qrows, rows, d, dk_t);
                    if let Some(plan) = self.bias {
                        plan.accumulate(
                            self.head,
                            r0..r0 + rows,
                            c0..c0 + cols,
                            &dp,
                            stride,
                            &mut stats,
                        );
                    }
                }
            }
        }
        dq.iter_mut().chain(dk.iter_mut()).for_each(|x| *x *= scale);
        (dq, dk, dv, stats)
    }
}
