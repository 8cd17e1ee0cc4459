//! FIRE as a tile bias source: b_h(i, j) = f_θ,h( ψ(|i − j|) / (ψ(max(i, L)) + ε) ).
//!
//! Three things make a FIRE tile cheap:
//! 1. ψ depends on the distance only: a table `ψ(n)` for `n < capacity` is built once per
//!    module (it depends on `c` alone), stored reversed so that a row of keys reads it forwards.
//! 2. The normaliser depends on the query only: one reciprocal per query per call.
//! 3. f_θ is compiled ([`PiecewiseLinear`]). For a query `i`, `x` grows with the distance, so
//!    each breakpoint `t` becomes a distance threshold "the first `n` with `x(i, n) ≥ t`"
//!    (a binary search in the ψ table, once per query per breakpoint in `(0, 1]` — on the
//!    causal part `x ≤ 1`). A tile row is then a few runs, each `A·ψ(n) + C`: one
//!    multiply-add per entry, vectorised, no lookup in the inner loop.
//!
//! FIRE-S is the same source shared by every layer: build one [`FireBias`] and one plan per
//! forward pass, and hand the plan to every layer.
//!
//! Non-piecewise-linear f_θ (GeLU) falls back to evaluating the MLP per entry (hidden layers
//! once, then only the requested head's output row).
//!
//! spec: [fire.bias], [fire.psi], [fire.threshold], [fire.normalizer], [fire.input],
//! [fire.shared], [conv.future]

use std::ops::Range;

use fire_vocabulary::{Activation, Position, Threshold, Transform};

use crate::compile::PiecewiseLinear;
use crate::device::{DeviceBias, DeviceTables};
use crate::error::{finite, Error, Result};
use crate::mlp::{Linear, Mlp};
use crate::simd::{self, Kernel, Madd};
use crate::tile::{check_positions, visible, AffineRow, BiasPlan, TileBias};

/// FIRE's scalar parameters (f_θ is an [`Mlp`] of its own): with the MLP they are a whole FIRE
/// module. spec: [fire.params]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FireParams {
    /// c of ψ_c (only |c| matters).
    pub c: f64,
    /// The frozen initial threshold L_init.
    pub l_init: f64,
    /// The learnable multiplier m.
    pub l_multiplier: f64,
    /// ε of the normaliser.
    pub eps: f64,
    /// ψ.
    pub transform: Transform,
    /// The threshold's role; only whether it is used matters here (a fixed m is frozen by the
    /// trainer, which ignores its gradient).
    pub threshold: Threshold,
}

impl FireParams {
    /// Appendix E's initial values: c = 0.1, L_init = 512, m = 1, ε = 1e-6. spec: [fire.defaults]
    pub fn appendix_e() -> Self {
        Self {
            c: 0.1,
            l_init: 512.0,
            l_multiplier: 1.0,
            eps: 1e-6,
            transform: Transform::Log,
            threshold: Threshold::Learnable,
        }
    }

    /// Rejects values the spec rejects. spec: [fire.params], [num.errors]
    pub fn validate(&self) -> Result<()> {
        finite("c", self.c)?;
        finite("L_init", self.l_init)?;
        finite("L_multiplier", self.l_multiplier)?;
        finite("eps", self.eps)?;
        let bad = |name: &str, reason: &str| {
            Err(Error::Parameter {
                name: name.into(),
                reason: reason.into(),
            })
        };
        if self.l_init <= 0.0 {
            return bad("L_init", "must be > 0");
        }
        if self.eps < 0.0 {
            return bad("eps", "must be >= 0");
        }
        if self.transform == Transform::Log && self.c == 0.0 {
            return bad("c", "must be != 0 with the log transform");
        }
        if self.eps == 0.0 && (!self.threshold.is_enabled() || self.l_multiplier == 0.0) {
            return bad("eps", "eps = 0 with no threshold divides 0 by 0 at query 0");
        }
        Ok(())
    }

    /// ψ(x). spec: [fire.psi]
    pub fn psi(&self, x: f64) -> f64 {
        match self.transform {
            Transform::Log => (self.c.abs() * x).ln_1p(),
            Transform::Identity => x,
        }
    }

    /// ψ(max(i, L)) + ε. spec: [fire.threshold], [fire.normalizer]
    pub fn normaliser(&self, i: f64) -> f64 {
        let t = if self.threshold.is_enabled() {
            i.max((self.l_multiplier * self.l_init).abs())
        } else {
            i
        };
        self.psi(t) + self.eps
    }

    /// x(i, j) in f64. spec: [fire.input], [conv.future]
    pub fn input(&self, i: Position, j: Position) -> f64 {
        self.psi(i.abs_diff(j) as f64) / self.normaliser(i as f64)
    }
}

/// A FIRE module whose trained numbers — θ, then `c` and `m` — arrive packed in one vector in
/// [grad.layout]'s order (the order of [`crate::fire_grad`]'s gradient): everything else about
/// it. A trainer keeps the numbers in its own differentiable tensors and rebuilds the module
/// from them at every step. spec: [grad.layout]
#[derive(Debug, Clone, PartialEq)]
pub struct PackedFire {
    /// `(out, in)` of every layer of f_θ.
    pub layers: Vec<(usize, usize)>,
    /// σ of the hidden layers.
    pub activation: Activation,
    /// Optional output activation.
    pub final_activation: Option<Activation>,
    /// `L_init`, ε, ψ and the threshold's role; `c` and `L_multiplier` are taken from the
    /// packed values instead.
    pub scalars: FireParams,
}

impl PackedFire {
    /// The number of packed parameters: θ, then `c` and `m`.
    pub fn packed_len(&self) -> usize {
        self.layers.iter().map(|(o, i)| o * (i + 1)).sum::<usize>() + 2
    }

    /// The module from packed values, compiled for distances below `capacity`.
    pub fn build(&self, packed: &[f32], capacity: usize) -> Result<FireBias> {
        if packed.len() != self.packed_len() {
            return Err(Error::Shape {
                what: "packed FIRE parameters".into(),
                expected: self.packed_len().to_string(),
                got: packed.len().to_string(),
            });
        }
        let mut at = 0;
        let mut take = |n: usize| {
            let v: Vec<f64> = packed[at..at + n].iter().map(|&x| f64::from(x)).collect();
            at += n;
            v
        };
        let mut layers = Vec::with_capacity(self.layers.len());
        for &(out, inp) in &self.layers {
            let w = take(out * inp);
            let b = take(out);
            layers.push(Linear::new(w, b, inp, out)?);
        }
        let scalars = take(2);
        let mlp = Mlp::new(layers, self.activation, self.final_activation)?;
        let params = FireParams {
            c: scalars[0],
            l_multiplier: scalars[1],
            ..self.scalars
        };
        FireBias::new(mlp, params, capacity)
    }
}

/// How f_θ is evaluated.
#[derive(Debug, Clone, PartialEq)]
pub enum FireFunction {
    /// Exact piecewise-linear form (ReLU / identity MLPs).
    Compiled(PiecewiseLinear),
    /// Direct evaluation (GeLU).
    Direct(Mlp),
}

/// A FIRE module ready for the fused kernel.
#[derive(Debug, Clone)]
pub struct FireBias {
    function: FireFunction,
    /// f_θ itself (the backward pass differentiates it).
    pub(crate) mlp: Mlp,
    params: FireParams,
    heads: usize,
    /// `psi_rev[capacity − 1 − n] = ψ(n)`, f32.
    psi_rev: Vec<f32>,
}

impl FireBias {
    /// Compiles `mlp` when it is piecewise linear and tabulates ψ for distances below
    /// `capacity` (e.g. the longest context the model will see; longer distances still work,
    /// on a slower per-entry path).
    pub fn new(mlp: Mlp, params: FireParams, capacity: usize) -> Result<Self> {
        params.validate()?;
        let heads = mlp.heads();
        let function = if mlp.is_piecewise_linear() {
            FireFunction::Compiled(PiecewiseLinear::compile(&mlp)?)
        } else {
            FireFunction::Direct(mlp.clone())
        };
        let capacity = capacity.clamp(1, u32::MAX as usize);
        let psi_rev = (0..capacity)
            .rev()
            .map(|n| params.psi(n as f64) as f32)
            .collect();
        Ok(Self {
            function,
            mlp,
            params,
            heads,
            psi_rev,
        })
    }

    /// `mlp` evaluated (and differentiated) directly, pair by pair, even when it would compile:
    /// the slow twin of the compiled path, for tests and comparisons.
    pub fn direct(mlp: Mlp, params: FireParams, capacity: usize) -> Result<Self> {
        let mut fire = Self::new(mlp, params, capacity)?;
        fire.function = FireFunction::Direct(fire.mlp.clone());
        Ok(fire)
    }

    /// The scalar parameters.
    pub fn params(&self) -> &FireParams {
        &self.params
    }

    /// How f_θ is evaluated.
    pub fn function(&self) -> &FireFunction {
        &self.function
    }

    pub(crate) fn capacity(&self) -> usize {
        self.psi_rev.len()
    }

    /// The reversed ψ table: `[capacity − 1 − n] = ψ(n)`.
    pub(crate) fn psi_rev_slice(&self) -> &[f32] {
        &self.psi_rev
    }

    /// ψ(n) from the table; `n < capacity`.
    fn psi_at(&self, n: usize) -> f32 {
        self.psi_rev[self.capacity() - 1 - n]
    }

    /// ψ(n) in f32: from the table when it holds `n`.
    pub(crate) fn psi(&self, n: u64) -> f32 {
        let m = self.capacity() as u64;
        if n < m {
            self.psi_rev[(m - 1 - n) as usize]
        } else {
            self.params.psi(n as f64) as f32
        }
    }
}

impl TileBias for FireBias {
    fn heads(&self) -> usize {
        self.heads
    }

    fn plan<'a>(
        &'a self,
        queries: &'a [Position],
        keys: &'a [Position],
    ) -> Result<Box<dyn BiasPlan + 'a>> {
        Ok(Box::new(self.fire_plan(queries, keys)?))
    }
}

impl DeviceTables for FireBias {
    fn device_bias(&self, queries: &[Position], distances: usize) -> Option<DeviceBias> {
        let FireFunction::Compiled(pl) = &self.function else {
            return None;
        };
        let (mut slope, mut intercept) = (Vec::new(), Vec::new());
        for h in 0..self.heads {
            let (s, c) = pl.head_pieces(h);
            slope.extend_from_slice(s);
            intercept.extend_from_slice(c);
        }
        Some(DeviceBias::Fire {
            psi: (0..distances as u64).map(|n| self.psi(n)).collect(),
            inv: queries
                .iter()
                .map(|&i| (1.0 / self.params.normaliser(i as f64)) as f32)
                .collect(),
            breakpoints: pl.breakpoints().iter().map(|&t| t as f32).collect(),
            slope,
            intercept,
        })
    }
}

impl FireBias {
    /// The plan behind [`TileBias::plan`], unboxed (the backward pass extends it).
    pub(crate) fn fire_plan<'a>(
        &'a self,
        queries: &'a [Position],
        keys: &'a [Position],
    ) -> Result<FirePlan<'a>> {
        let contiguous = check_positions(queries, keys)?;
        let inv: Vec<f32> = queries
            .iter()
            .map(|&i| (1.0 / self.params.normaliser(i as f64)) as f32)
            .collect();
        let (first, count, thresholds) = match &self.function {
            FireFunction::Compiled(pl) => {
                let bps = pl.breakpoints();
                let first = pl.segment(0.0);
                let count = bps[first..].partition_point(|&t| t <= 1.0);
                let m = self.capacity();
                let mut thr = Vec::with_capacity(queries.len() * count);
                for &inv_i in &inv {
                    for &t in &bps[first..first + count] {
                        // The first distance whose x reaches t, in the kernel's own f32
                        // arithmetic; `m` when none in the table does.
                        let found = partition(m, |n| f64::from(self.psi_at(n) * inv_i) < t);
                        thr.push(found as u32);
                    }
                }
                (first, count, thr)
            }
            FireFunction::Direct(_) => (0, 0, Vec::new()),
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
        })
    }
}

/// The first `n` in `0..m` where `below(n)` turns false (`below` is true then false); `m` when
/// it never does.
fn partition(m: usize, below: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, m);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if below(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
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
    first: usize,
    /// Breakpoints in `(0, 1]`.
    count: usize,
    /// `[queries, count]`.
    thresholds: Vec<u32>,
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

    /// The runs of one causal row on the fast path: `(segment, start, end)` for each maximal
    /// run of columns `start..end` (of `0..vis`, column `t` at distance `nhi − t`) whose x lies
    /// in one segment of the compiled f_θ, in column order. An iterator rather than a callback:
    /// a closure is compiled as a function of its own when not inlined, without the target
    /// features of the SIMD dispatch its caller runs under (measured: the gradient's run sums
    /// ran at baseline width, 7 % of a FIRE backward pass).
    #[inline(always)]
    pub(crate) fn runs_of(&self, q: usize, nhi: usize, vis: usize) -> Runs<'_> {
        let thr = &self.thresholds[q * self.count..(q + 1) * self.count];
        Runs {
            // Away from the diagonal every threshold is at or below `nhi`: no search.
            k: match thr.last() {
                Some(&t) if t as usize <= nhi => thr.len(),
                _ => thr.partition_point(|&t| t as usize <= nhi),
            },
            thr,
            first: self.first,
            nhi,
            vis,
            start: 0,
        }
    }

    /// The causal part of one row on the fast path: contiguous keys whose distances the ψ
    /// table holds. `psi` is ψ at distances `nhi, nhi − 1, …` (one per visible key).
    #[inline(always)]
    fn runs(
        &self,
        pl: &PiecewiseLinear,
        head: usize,
        q: usize,
        nhi: usize,
        psi: &[f32],
        row: &mut [f32],
    ) {
        let inv = self.inv[q];
        let (slopes, intercepts) = pl.head_pieces(head);
        let vis = psi.len().min(row.len());
        for (seg, start, end) in self.runs_of(q, nhi, vis) {
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
            let thr = &self.thresholds[q * self.count..(q + 1) * self.count];
            // Far from the diagonal every threshold lies below the row's shortest distance:
            // the last segment, without a search.
            let lo = nhi + 1 - vis;
            let k = match thr.last() {
                Some(&t) if t as usize <= lo => thr.len(),
                _ => thr.partition_point(|&t| t as usize <= nhi),
            };
            if k == 0 || thr[k - 1] as usize <= lo {
                // Every distance of the row, nhi down to nhi + 1 − vis, is in one segment.
                let seg = self.first + k;
                let (a, c) = (slopes[seg] * inv, intercepts[seg]);
                // Column t reads ψ_rev[base + t]: inside the table for every t < stride iff
                // stride ≤ nhi + 1 (the padding columns continue to shorter distances).
                if let (Some(affine), true) = (affine.as_deref_mut(), stride <= nhi + 1) {
                    affine[r] = Some(AffineRow { a, c, offset: base });
                    continue;
                }
                for (o, p) in row.iter_mut().zip(psi) {
                    *o = a * p + c;
                }
            } else {
                self.runs(pl, head, q, nhi, psi, row);
            }
        }
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
        4 * (self.inv.len() + self.thresholds.len())
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
