//! One call's FIRE state ([`FirePlan`]) and the tile fills built on it: per query the
//! reciprocal normaliser and, for a compiled f_θ, the distance at which the row crosses each
//! breakpoint in `(0, 1]`; a causal row is then a few runs of one segment each, `A·ψ(n) + C`
//! per entry, or is handed back to the score product as affine in the ψ table (one piece, or
//! two where it crosses one breakpoint inside the tile).
//!
//! spec: [fire.bias], [fire.threshold], [fire.normalizer], [fire.input], [conv.future]

use std::ops::Range;

use fire_vocabulary::Position;
use rayon::prelude::*;

use super::{FireBias, FireFunction};
use crate::compile::PiecewiseLinear;
use crate::error::Result;
use crate::simd::{self, Kernel, Madd};
use crate::tile::{check_positions, visible, AffineRow, BiasPlan, SPLIT_BLOCK};

impl FireBias {
    /// The plan behind [`TileBias::plan`], unboxed (the backward pass extends it).
    pub(crate) fn fire_plan<'a>(
        &'a self,
        queries: &'a [Position],
        keys: &'a [Position],
    ) -> Result<FirePlan<'a>> {
        let contiguous = check_positions(queries, keys)?;
        // Per query, on rayon's threads (serial, this set-up had been 2 % of a two-thread
        // FIRE forward pass at 2 048 tokens): the reciprocal normaliser and the distance at
        // which the row crosses each breakpoint in (0, 1].
        let inv: Vec<f32> = queries
            .par_iter()
            .map(|&i| (1.0 / self.params.normaliser(i as f64)) as f32)
            .collect();
        let (first, count, thresholds, reach) = match &self.function {
            FireFunction::Compiled(pl) => {
                let bps = pl.breakpoints();
                let first = pl.segment(0.0);
                let count = bps[first..].partition_point(|&t| t <= 1.0);
                let bps = &bps[first..first + count];
                let nq = queries.len();
                let mut thr = vec![0u32; nq * count];
                let mut reach = vec![0u32; nq];
                // A few chunks per thread, each searching from its own first query on.
                let chunk = nq.div_ceil(4 * rayon::current_num_threads()).max(256);
                thr.par_chunks_mut((chunk * count).max(1))
                    .zip(reach.par_chunks_mut(chunk))
                    .enumerate()
                    .for_each(|(c, (thr, reach))| {
                        let at = c * chunk..(c * chunk + reach.len());
                        let (q, inv) = (&queries[at.clone()], &inv[at]);
                        self.thresholds_into(q, inv, keys, bps, thr, reach);
                    });
                (first, count, thr, reach)
            }
            FireFunction::Direct(_) => (0, 0, Vec::new(), Vec::new()),
        };
        Ok(FirePlan {
            fire: self,
            queries,
            keys,
            contiguous,
            inv,
            first,
            count,
            thresholds,
            reach,
        })
    }
}

/// Columns per vector step of [`FirePlan::runs`]: an AVX-512 register of f32 (two of AVX2's).
const SPAN: usize = 16;

/// One call's FIRE state: per-query reciprocal normalisers and, for compiled f_θ, the
/// distance at which each row crosses each breakpoint in `(0, 1]`.
pub(crate) struct FirePlan<'a> {
    pub(crate) fire: &'a FireBias,
    pub(crate) queries: &'a [Position],
    pub(crate) keys: &'a [Position],
    pub(crate) contiguous: bool,
    pub(crate) inv: Vec<f32>,
    /// Index of the segment holding x = 0.
    pub(crate) first: usize,
    /// Breakpoints in `(0, 1]`.
    count: usize,
    /// `[queries, count]`.
    thresholds: Vec<u32>,
    /// Per query, how many of its thresholds a causal pair can cross (those at or below its
    /// longest distance): the rest never enter a search.
    reach: Vec<u32>,
}

impl FirePlan<'_> {
    /// One entry the slow, general way: any distance, any key order, keys after the query.
    fn entry(&self, head: usize, inv: f32, n: u64, scratch: &mut [Vec<f64>; 2]) -> f32 {
        let x = self.fire.psi(n) * inv;
        match &self.fire.function {
            FireFunction::Compiled(pl) => {
                let (a, c) = pl.piece(head, pl.segment(f64::from(x)));
                a * x + c
            }
            FireFunction::Direct(mlp) => mlp.eval_head(f64::from(x), head, scratch) as f32,
        }
    }

    /// Every threshold of row `q`, crossable or not (for tests).
    #[cfg(test)]
    pub(crate) fn thresholds_of(&self, q: usize) -> &[u32] {
        &self.thresholds[q * self.count..(q + 1) * self.count]
    }

    /// Row `q`'s thresholds that a causal pair can cross, in increasing order.
    #[inline(always)]
    fn crossable(&self, q: usize) -> &[u32] {
        let at = q * self.count;
        &self.thresholds[at..at + self.reach[q] as usize]
    }

    /// How many of row `q`'s thresholds lie at or below `nhi` (its segment at distance `nhi`
    /// is `first` plus that), stepping from `hint`, the count of a neighbouring row: the rows
    /// of a tile are one distance apart and their thresholds nearly equal, so the count moves
    /// by zero or one from row to row (a binary search per row was a third of the gradient's
    /// run sums and of the fill's time).
    #[inline(always)]
    pub(crate) fn crossed(&self, q: usize, nhi: usize, hint: usize) -> usize {
        let thr = self.crossable(q);
        let mut k = hint.min(thr.len());
        while k < thr.len() && thr[k] as usize <= nhi {
            k += 1;
        }
        while k > 0 && thr[k - 1] as usize > nhi {
            k -= 1;
        }
        k
    }

    /// Whether row `q`'s distances `lo..=nhi` all lie in one segment, given `k`, its
    /// [`Self::crossed`] count at `nhi`.
    #[inline(always)]
    pub(crate) fn one_segment(&self, q: usize, k: usize, lo: usize) -> bool {
        k == 0 || self.crossable(q)[k - 1] as usize <= lo
    }

    /// The runs of one causal row on the fast path: `(segment, start, end)` for each maximal
    /// run of columns `start..end` (of `0..vis`, column `t` at distance `nhi − t`) whose x lies
    /// in one segment of the compiled f_θ, in column order; `k` is [`Self::crossed`] at `nhi`.
    /// An iterator rather than a callback: a closure is compiled as a function of its own when
    /// not inlined, without the target features of the SIMD dispatch its caller runs under
    /// (measured: the gradient's run sums ran at baseline width, 7 % of a FIRE backward pass).
    #[inline(always)]
    pub(crate) fn runs_of(&self, q: usize, k: usize, nhi: usize, vis: usize) -> Runs<'_> {
        Runs {
            k,
            thr: self.crossable(q),
            first: self.first,
            nhi,
            vis,
            start: 0,
        }
    }

    /// The causal part of one row on the fast path: contiguous keys whose distances the ψ
    /// table holds. `psi` is ψ at distances `nhi, nhi − 1, …` (one per visible key).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn runs(
        &self,
        pl: &PiecewiseLinear,
        head: usize,
        q: usize,
        k: usize,
        nhi: usize,
        psi: &[f32],
        row: &mut [f32],
    ) {
        let inv = self.inv[q];
        let (slopes, intercepts) = pl.head_pieces(head);
        let vis = psi.len().min(row.len());
        for (seg, start, end) in self.runs_of(q, k, nhi, vis) {
            let a = slopes[seg] * inv;
            let c = intercepts[seg];
            // Whole vectors while they stay inside the row's visible part: a run's last one
            // spills into the next run's columns, which that run then overwrites (runs come
            // in column order). Near the diagonal the runs are a few columns long, and a
            // loop per run would be mostly its scalar remainder.
            let mut t = start;
            while t < end {
                let (Some(o), Some(p)) = (
                    row[t..vis].first_chunk_mut::<SPAN>(),
                    psi[t..vis].first_chunk::<SPAN>(),
                ) else {
                    break;
                };
                for l in 0..SPAN {
                    o[l] = a * p[l] + c;
                }
                t += SPAN;
            }
            if t < end && end >= start + SPAN {
                // A run at least a vector long that ends within a vector of the row's end: its
                // last vector ends at `end`,
                // over columns of its own (written twice, the same value).
                let (o, p) = (&mut row[end - SPAN..end], &psi[end - SPAN..end]);
                for l in 0..SPAN {
                    o[l] = a * p[l] + c;
                }
                continue;
            }
            for (o, p) in row[t.min(end)..end].iter_mut().zip(&psi[t.min(end)..end]) {
                *o = a * p + c;
            }
        }
    }
}

impl FirePlan<'_> {
    /// [`BiasPlan::fill_causal`] for contiguous keys and a compiled f_θ, the training and
    /// prefill case: what depends on the tile only is looked up once, and a row that crosses
    /// no distance threshold (most rows away from the diagonal: a tile spans a narrow range of
    /// x there) is one multiply-add loop over the ψ table, with no run bookkeeping — or, with
    /// `affine` ([`BiasPlan::fill_causal_affine`]), is handed back as `(slope, intercept, ψ
    /// offset)` when the ψ table holds its whole stride.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn fill_causal_compiled(
        &self,
        pl: &PiecewiseLinear,
        head: usize,
        rows: Range<usize>,
        cols: Range<usize>,
        out: &mut [f32],
        stride: usize,
        mut affine: Option<&mut [Option<AffineRow>]>,
    ) {
        let (slopes, intercepts) = pl.head_pieces(head);
        let m = self.fire.capacity();
        let width = cols.len() as Position;
        let p0 = self.keys[cols.start];
        let mut scratch = [Vec::new(), Vec::new()];
        if let Some(affine) = affine.as_deref_mut() {
            affine.fill(None);
        }
        let mut hint = 0;
        for (r, q) in rows.enumerate() {
            let i = self.queries[q];
            // Contiguous keys: those up to `i` are a prefix of the tile.
            let vis = (i + 1).saturating_sub(p0).min(width) as usize;
            if vis == 0 {
                continue;
            }
            let row = &mut out[r * stride..r * stride + vis];
            let (nhi, inv) = (i - p0, self.inv[q]);
            if nhi >= m as Position {
                // Distances past the ψ table: entry by entry.
                for (t, o) in (0..).zip(row.iter_mut()) {
                    *o = self.entry(head, inv, nhi - t, &mut scratch);
                }
                continue;
            }
            let nhi = nhi as usize;
            let base = m - 1 - nhi;
            let psi = &self.fire.psi_rev[base..base + vis];
            let k = self.crossed(q, nhi, hint);
            hint = k;
            let lo = nhi + 1 - vis;
            // Column t reads ψ_rev[base + t]: inside the table for every t < stride (columns
            // past the diagonal read its zero padding, which the kernel masks).
            let in_table = base + stride <= self.fire.psi_rev.len();
            if self.one_segment(q, k, lo) {
                // Every distance of the row, nhi down to lo, is in one segment.
                let seg = self.first + k;
                let (a, c) = (slopes[seg] * inv, intercepts[seg]);
                if let (Some(affine), true) = (affine.as_deref_mut(), in_table) {
                    affine[r] = Some(AffineRow::whole(a, c, base));
                    continue;
                }
                for (o, p) in row.iter_mut().zip(psi) {
                    *o = a * p + c;
                }
            } else if let (Some(affine), true, true) = (
                affine.as_deref_mut(),
                in_table,
                self.one_segment(q, k - 1, lo),
            ) {
                // One breakpoint crossed inside the tile (k ≥ 1 here): segment first + k up
                // to the distance where x reaches it, first + k − 1 after ([`Runs`]).
                let split = nhi + 1 - self.crossable(q)[k - 1] as usize;
                let (before, after) = (self.first + k, self.first + k - 1);
                let two = AffineRow {
                    a: slopes[before] * inv,
                    c: intercepts[before],
                    offset: base,
                    split,
                    a2: slopes[after] * inv,
                    c2: intercepts[after],
                };
                // The block around the split, which the product reads from the tile: whole
                // (in vectors) unless the row ends inside it.
                let cols = two.written(vis);
                affine[r] = Some(two);
                if let (Some(o), Some(p)) = (
                    row[cols.clone()].first_chunk_mut::<SPLIT_BLOCK>(),
                    psi[cols.clone()].first_chunk::<SPLIT_BLOCK>(),
                ) {
                    two_piece_block(&two, cols.start, o, p);
                    continue;
                }
                let (a, c) = (two.a, two.c);
                for (o, p) in row[cols.start..split]
                    .iter_mut()
                    .zip(&psi[cols.start..split])
                {
                    *o = a * p + c;
                }
                let (a, c) = (two.a2, two.c2);
                for (o, p) in row[split..cols.end].iter_mut().zip(&psi[split..cols.end]) {
                    *o = a * p + c;
                }
            } else {
                self.runs(pl, head, q, k, nhi, psi, row);
            }
        }
    }
}

/// The [`SPLIT_BLOCK`] columns of a two-piece row from column `at` on (`row` and `psi` those
/// columns): whole vectors, each lane's piece taken by an integer mask on the pieces' bits
/// (a lane-wise `if` on floats is compiled lane by lane), where two loops, one per piece, each
/// ended in a scalar remainder.
#[inline(always)]
fn two_piece_block(
    two: &AffineRow,
    at: usize,
    row: &mut [f32; SPLIT_BLOCK],
    psi: &[f32; SPLIT_BLOCK],
) {
    let (a1, c1, a2, c2) = (
        two.a.to_bits(),
        two.c.to_bits(),
        two.a2.to_bits(),
        two.c2.to_bits(),
    );
    let split = two.split.saturating_sub(at).min(SPLIT_BLOCK) as u32;
    for l in 0..SPLIT_BLOCK {
        let second = u32::from(l as u32 >= split).wrapping_neg();
        let a = f32::from_bits((a1 & !second) | (a2 & second));
        let c = f32::from_bits((c1 & !second) | (c2 & second));
        row[l] = a * psi[l] + c;
    }
}

/// The runs of one causal row ([`FirePlan::runs_of`]): the thresholds at or below `nhi` are
/// walked down from `k`, each closing the run that starts at `start`.
pub(crate) struct Runs<'a> {
    thr: &'a [u32],
    first: usize,
    k: usize,
    nhi: usize,
    vis: usize,
    start: usize,
}

impl Iterator for Runs<'_> {
    type Item = (usize, usize, usize);

    #[inline(always)]
    fn next(&mut self) -> Option<Self::Item> {
        while self.start < self.vis {
            let (seg, start) = (self.first + self.k, self.start);
            let end = if self.k == 0 {
                self.vis
            } else {
                self.vis.min(self.nhi - self.thr[self.k - 1] as usize + 1)
            };
            if self.k == 0 {
                // The last segment runs to `vis`: nothing after it.
                self.start = self.vis;
            } else {
                self.k -= 1;
                self.start = start.max(end);
            }
            if end > start {
                return Some((seg, start, end));
            }
        }
        None
    }
}

impl BiasPlan for FirePlan<'_> {
    fn fill(
        &self,
        head: usize,
        rows: Range<usize>,
        cols: Range<usize>,
        out: &mut [f32],
        stride: usize,
    ) {
        self.fill_rows(head, rows, cols, out, stride, false, None);
    }

    fn fill_causal(
        &self,
        head: usize,
        rows: Range<usize>,
        cols: Range<usize>,
        out: &mut [f32],
        stride: usize,
    ) {
        self.dispatch_causal(head, rows, cols, out, stride, None);
    }

    fn fill_causal_affine(
        &self,
        head: usize,
        rows: Range<usize>,
        cols: Range<usize>,
        out: &mut [f32],
        stride: usize,
        affine: &mut [Option<AffineRow>],
    ) -> &[f32] {
        self.dispatch_causal(head, rows, cols, out, stride, Some(affine));
        &self.fire.psi_rev
    }

    fn bytes(&self) -> usize {
        4 * (self.inv.len() + self.thresholds.len() + self.reach.len())
    }
}

impl FirePlan<'_> {
    /// The causal fill under the SIMD dispatch. The kernel calls it through `dyn BiasPlan`,
    /// outside its own dispatch: without one here the multiply-add loops would be compiled for
    /// the baseline target.
    fn dispatch_causal(
        &self,
        head: usize,
        rows: Range<usize>,
        cols: Range<usize>,
        out: &mut [f32],
        stride: usize,
        affine: Option<&mut [Option<AffineRow>]>,
    ) {
        struct Fill<'a, 'b> {
            plan: &'a FirePlan<'b>,
            head: usize,
            rows: Range<usize>,
            cols: Range<usize>,
            out: &'a mut [f32],
            stride: usize,
            affine: Option<&'a mut [Option<AffineRow>]>,
        }
        impl Kernel for Fill<'_, '_> {
            type Output = ();
            #[inline(always)]
            fn run<M: Madd>(self) {
                let Fill {
                    plan,
                    head,
                    rows,
                    cols,
                    out,
                    stride,
                    affine,
                } = self;
                plan.fill_rows(head, rows, cols, out, stride, true, affine);
            }
        }
        simd::dispatch(Fill {
            plan: self,
            head,
            rows,
            cols,
            out,
            stride,
            affine,
        });
    }

    /// [`BiasPlan::fill`]; with `causal`, keys after the query are left as they are, and rows
    /// may be handed back in `affine` (all `None` on the general path).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn fill_rows(
        &self,
        head: usize,
        rows: Range<usize>,
        cols: Range<usize>,
        out: &mut [f32],
        stride: usize,
        causal: bool,
        affine: Option<&mut [Option<AffineRow>]>,
    ) {
        if let (true, true, FireFunction::Compiled(pl)) =
            (causal, self.contiguous, &self.fire.function)
        {
            self.fill_causal_compiled(pl, head, rows, cols, out, stride, affine);
            return;
        }
        if let Some(affine) = affine {
            affine.fill(None);
        }
        let width = cols.len();
        let mut scratch = [Vec::new(), Vec::new()];
        let m = self.fire.capacity();
        for (r, q) in rows.enumerate() {
            let i = self.queries[q];
            let inv = self.inv[q];
            let row = &mut out[r * stride..r * stride + width];
            let vis = visible(self.keys, &cols, i, self.contiguous);
            let p0 = self.keys[cols.start];
            let fast = match &self.fire.function {
                FireFunction::Compiled(pl) if self.contiguous && vis > 0 && i - p0 < m as u64 => {
                    Some(pl)
                }
                _ => None,
            };
            if let Some(pl) = fast {
                let nhi = (i - p0) as usize;
                let base = m - 1 - nhi;
                self.runs(
                    pl,
                    head,
                    q,
                    self.crossed(q, nhi, 0),
                    nhi,
                    &self.fire.psi_rev[base..base + vis],
                    &mut row[..vis],
                );
            } else {
                for (o, &j) in row[..vis]
                    .iter_mut()
                    .zip(&self.keys[cols.start..cols.start + vis])
                {
                    *o = self.entry(head, inv, i - j, &mut scratch);
                }
            }
            if causal {
                continue;
            }
            for (o, &j) in row[vis..]
                .iter_mut()
                .zip(&self.keys[cols.start + vis..cols.end])
            {
                *o = self.entry(head, inv, j - i, &mut scratch);
            }
        }
    }
}
