//! FIRE's parameter gradients from the fused backward pass's `dS` tiles, without ever forming
//! a per-pair derivative of the MLP on the fast path.
//!
//! Inside one segment of the compiled f_θ every ReLU keeps its state, so f_θ is affine in `x`
//! and so is its gradient with respect to θ: `∂f_h/∂θ(x) = A_h + x·B_h` ([grad.theta] with a
//! fixed activation pattern). Summing over the pairs of a segment,
//!
//! ```text
//! Σ_p g_p·∂f_h/∂θ(x_p) = A_h·S0 + B_h·S1,   S0 = Σ_p g_p,   S1 = Σ_p g_p·x_p,
//! ```
//!
//! so the backward pass only adds two numbers per pair and head into the segment's `(S0, S1)`,
//! and θ's gradient is finished by one forced-pattern backpropagation per segment and head at
//! the end ([`crate::mlp::Mlp::vjp`]). `c` and `m` enter through x itself:
//! `∂x/∂c = P'(n)/N − P(n)·N'_c/N²`, `∂x/∂m = −P(n)·N'_m/N²` ([grad.c], [grad.m]), with
//! `∂f_h/∂x` the segment's slope, so per run of one segment the pass needs `Σ g`, `Σ g·ψ(n)`
//! and `Σ g·∂ψ(n)/∂c`: three multiply-adds per pair and head.
//!
//! Off the fast path (non-contiguous keys, distances past the ψ table, keys after the query)
//! pairs are handled one at a time with the same statistics; a GeLU f_θ (no segments) is
//! backpropagated per pair.
//!
//! Convention: a pair exactly on a breakpoint takes the gradient of the segment on its right
//! (the segment the forward evaluates it with), where [grad.kinks] would take relu'(0) = 0 for
//! the unit that switches there. The two differ only on that measure-zero set; the materialised
//! path and the conformance suite follow [grad.kinks] literally.
//!
//! Packed parameter order ([grad.layout]): each layer's weight (`[out, in]` row-major) then
//! bias, then `c`, then `m` (`L_multiplier`).
//!
//! spec: [grad.theta], [grad.c], [grad.m], [grad.vjp], [fire.bias]

use std::ops::Range;

use fire_vocabulary::{Position, Transform};

use crate::backward::{dispatch_accumulate, AccumulateRows, GradPlan};
use crate::compile::{intervals, representative, PiecewiseLinear};
use crate::error::Result;
use crate::fire::{FireBias, FireFunction, FirePlan};
use crate::simd::Madd;
use crate::tile::{visible, AffineRow, BiasPlan, TileBias};

/// `sign(y)` with `sign(0) = 0` ([grad.kinks]).
fn sign(y: f64) -> f64 {
    if y > 0.0 {
        1.0
    } else if y < 0.0 {
        -1.0
    } else {
        0.0
    }
}

impl FireBias {
    /// The plan of [`crate::tile::TileBias::plan`] extended for the backward pass.
    pub fn grad_plan<'a>(
        &'a self,
        queries: &'a [Position],
        keys: &'a [Position],
    ) -> Result<Box<dyn GradPlan + 'a>> {
        let plan = self.fire_plan(queries, keys)?;
        let p = *self.params();
        let log = p.transform == Transform::Log;
        let (c_abs, c_sign) = (p.c.abs(), sign(p.c));
        // ∂ψ(y)/∂c and ψ'(y).
        let dpsi_dc = move |y: f64| {
            if log {
                c_sign * y / (c_abs * y + 1.0)
            } else {
                0.0
            }
        };
        let dpsi_dy = move |y: f64| if log { c_abs / (c_abs * y + 1.0) } else { 1.0 };
        let l = (p.l_multiplier * p.l_init).abs();
        let dl_dm = sign(p.l_multiplier * p.l_init) * p.l_init;
        let mut rows = Vec::with_capacity(queries.len());
        for &i in queries {
            let i = i as f64;
            let (m, dm_dl) = if !p.threshold.is_enabled() {
                (i, 0.0)
            } else if l > i {
                (l, 1.0)
            } else if l == i {
                (i, 0.5)
            } else {
                (i, 0.0)
            };
            let inv = 1.0 / p.normaliser(i);
            rows.push(Row {
                inv,
                dn_dc: dpsi_dc(m),
                dn_dm: dpsi_dy(m) * dm_dl * dl_dm,
            });
        }
        let cap = self.capacity();
        let dpsi_rev = (0..cap).rev().map(|n| dpsi_dc(n as f64) as f32).collect();
        let theta = self.mlp.param_count();
        let stats_len = match self.function() {
            FireFunction::Compiled(pl) => self.heads() * pl.segments() * 2 + 2,
            FireFunction::Direct(_) => theta + 2,
        };
        Ok(Box::new(FireGradPlan {
            plan,
            rows,
            dpsi_rev,
            dpsi_dc: Box::new(dpsi_dc),
            theta,
            stats_len,
        }))
    }
}

/// Per-query constants of the gradient, f64.
struct Row {
    /// 1/N.
    inv: f64,
    /// ∂N/∂c.
    dn_dc: f64,
    /// ∂N/∂m.
    dn_dm: f64,
}

struct FireGradPlan<'a> {
    plan: FirePlan<'a>,
    rows: Vec<Row>,
    /// `dpsi_rev[capacity − 1 − n] = ∂ψ(n)/∂c`, f32 (the fast path's table).
    dpsi_rev: Vec<f32>,
    dpsi_dc: Box<dyn Fn(f64) -> f64 + Send + Sync>,
    theta: usize,
    stats_len: usize,
}

impl FireGradPlan<'_> {
    /// Where `(dc, dm)` sit in the statistics.
    fn scalars(&self) -> usize {
        self.stats_len - 2
    }

    /// One pair off the fast path: query row `q` at distance `n` (mirrored for keys after it).
    #[allow(clippy::too_many_arguments)]
    fn pair(&self, head: usize, q: usize, n: u64, g: f32, stats: &mut [f64], scratch: &mut [f64]) {
        let fire = self.plan.fire;
        let row = &self.rows[q];
        let psi = fire.psi(n);
        let x = psi * self.plan.inv[q];
        let g = f64::from(g);
        let dx = match fire.function() {
            FireFunction::Compiled(pl) => {
                let seg = pl.segment(f64::from(x));
                let at = (head * pl.segments() + seg) * 2;
                stats[at] += g;
                stats[at + 1] += g * f64::from(x);
                g * pl.slope(head, seg)
            }
            FireFunction::Direct(mlp) => {
                scratch.fill(0.0);
                scratch[head] = g;
                mlp.vjp(f64::from(x), scratch, None, &mut stats[..self.theta])
            }
        };
        let (psi, dpsi) = (f64::from(psi), (self.dpsi_dc)(n as f64));
        let s = self.scalars();
        stats[s] += dx * (row.inv * dpsi - row.inv * row.inv * psi * row.dn_dc);
        stats[s + 1] -= dx * row.inv * row.inv * psi * row.dn_dm;
    }

    /// One causal row on the fast path (compiled f_θ, contiguous keys, distances in the table):
    /// each run's lane-wise sums go into its segment's accumulators in `acc`. `hint`: the
    /// previous row's [`FirePlan::crossed`] count, updated to this row's.
    #[inline(always)]
    fn fast_row<M: Madd>(
        &self,
        q: usize,
        nhi: usize,
        g: &[f32],
        hint: &mut usize,
        acc: &mut Lanes,
    ) {
        let fire = self.plan.fire;
        let base = fire.capacity() - 1 - nhi;
        let vis = g.len();
        let psi = &fire.psi_rev_slice()[base..base + vis];
        let dpsi = &self.dpsi_rev[base..base + vis];
        let row = &self.rows[q];
        // The per-row factors of the four statistics (f32: they scale lane-wise sums).
        let factors = (
            row.inv as f32,
            (row.inv * row.inv * row.dn_dc) as f32,
            (row.inv * row.inv * row.dn_dm) as f32,
        );
        // The row in whole vectors, the last one zero-padded (a zero g adds nothing) and copied
        // once per row rather than once per run.
        let (gv, gt) = g.as_chunks::<PARTIALS>();
        let (pv, pt) = psi.as_chunks::<PARTIALS>();
        let (dv, dt) = dpsi.as_chunks::<PARTIALS>();
        let mut last = [[0f32; PARTIALS]; 3];
        for (dst, src) in last.iter_mut().zip([gt, pt, dt]) {
            // By element: under 16 of them, where `copy_from_slice` calls `memcpy` (a call per
            // row and table, even for none).
            for (d, &s) in dst.iter_mut().zip(src) {
                *d = s;
            }
        }
        let full = gv.len().min(pv.len()).min(dv.len());
        let k = self.plan.crossed(q, nhi, *hint);
        *hint = k;
        let row = Row3 {
            v: [gv, pv, dv],
            full,
            last: &last,
        };
        if self.plan.one_segment(q, k, nhi + 1 - vis) {
            // Most rows away from the diagonal: one run, no masks.
            let seg = self.plan.first + k;
            row.sums::<M, false>(0..vis, factors, &mut acc.segs[seg]);
            acc.touched[seg] = true;
        } else {
            for (seg, start, end) in self.plan.runs_of(q, k, nhi, vis) {
                row.sums::<M, true>(start..end, factors, &mut acc.segs[seg]);
                acc.touched[seg] = true;
            }
        }
    }

    /// Adds one tile's lane-wise accumulators into the statistics (f64), each segment's
    /// `(Σ g, Σ g·x)` and, through its slope, `(dc, dm)`:
    /// `dc += slope·Σ g·(ψ'/N − ψ·N'_c/N²)`, `dm −= slope·Σ g·ψ·N'_m/N²` ([grad.c], [grad.m]).
    /// Leaves `acc` zeroed for the next tile.
    fn flush(&self, pl: &PiecewiseLinear, head: usize, acc: &mut Lanes, stats: &mut [f64]) {
        let segs = pl.segments();
        let (mut dc, mut dm) = (0.0, 0.0);
        for (seg, sums) in acc.segs.iter_mut().enumerate() {
            if !std::mem::take(&mut acc.touched[seg]) {
                continue;
            }
            let [s0, s1, c, m] = &*sums;
            let total = |v: &[f32; PARTIALS]| v.iter().map(|&x| f64::from(x)).sum::<f64>();
            let at = (head * segs + seg) * 2;
            stats[at] += total(s0);
            stats[at + 1] += total(s1);
            let slope = pl.slope(head, seg);
            dc += slope * total(c);
            dm -= slope * total(m);
            *sums = [[0.0; PARTIALS]; 4];
        }
        let s = self.scalars();
        stats[s] += dc;
        stats[s + 1] += dm;
    }
}

/// Lanes of the accumulators of the fast path ([`run_sums`]): the widest vector of f32 the
/// dispatch compiles for (AVX-512's 16; AVX2's 8 twice).
const PARTIALS: usize = 16;

/// Per segment of f_θ, lane-wise accumulators over one tile: `Σ g`, `Σ g·x` (x = ψ/N) and the
/// `c` and `m` terms before the segment's slope. Summed across lanes (in f64) once per tile, not
/// once per run of a row; zero between tiles ([`FireGradPlan::flush`] clears what it reads).
#[derive(Default)]
struct Lanes {
    segs: Vec<[[f32; PARTIALS]; 4]>,
    touched: Vec<bool>,
}

impl Lanes {
    /// Zeroed accumulators for `segments` segments, reusing `self`'s when it has them (a
    /// backward pass calls [`GradPlan::accumulate`] once per tile, and most tiles touch a few
    /// of the segments: no allocation and no zeroing of all of them per tile).
    fn with_segments(mut self, segments: usize) -> Self {
        if self.segs.len() != segments {
            self.segs = vec![[[0.0; PARTIALS]; 4]; segments];
            self.touched = vec![false; segments];
        }
        self
    }
}

thread_local! {
    /// Each thread's [`Lanes`], taken for one tile and put back.
    static LANES: std::cell::Cell<Lanes> = std::cell::Cell::new(Lanes::default());
}

impl BiasPlan for FireGradPlan<'_> {
    fn fill(
        &self,
        head: usize,
        rows: Range<usize>,
        cols: Range<usize>,
        out: &mut [f32],
        stride: usize,
    ) {
        self.plan.fill(head, rows, cols, out, stride);
    }

    fn fill_causal(
        &self,
        head: usize,
        rows: Range<usize>,
        cols: Range<usize>,
        out: &mut [f32],
        stride: usize,
    ) {
        self.plan.fill_causal(head, rows, cols, out, stride);
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
        self.plan
            .fill_causal_affine(head, rows, cols, out, stride, affine)
    }

    fn bytes(&self) -> usize {
        self.plan.bytes() + 4 * self.dpsi_rev.len() + 24 * self.rows.len()
    }
}

impl GradPlan for FireGradPlan<'_> {
    fn as_bias(&self) -> &dyn BiasPlan {
        self
    }

    fn stats_len(&self) -> usize {
        self.stats_len
    }

    fn accumulate(
        &self,
        head: usize,
        rows: Range<usize>,
        cols: Range<usize>,
        ds: &[f32],
        stride: usize,
        stats: &mut [f64],
    ) {
        dispatch_accumulate(self, head, rows, cols, ds, stride, stats);
    }

    fn gradient(&self, stats: &[f64]) -> Result<Vec<f64>> {
        let fire = self.plan.fire;
        let mut grad = vec![0f64; self.theta + 2];
        match fire.function() {
            FireFunction::Compiled(pl) => {
                let heads = fire.heads();
                let segs = pl.segments();
                let mut g0 = vec![0f64; heads];
                let mut g1 = vec![0f64; heads];
                for (seg, (lo, hi)) in intervals(pl.breakpoints()).enumerate() {
                    for h in 0..heads {
                        g0[h] = stats[(h * segs + seg) * 2];
                        g1[h] = stats[(h * segs + seg) * 2 + 1];
                    }
                    if g0.iter().chain(&g1).all(|&v| v == 0.0) {
                        continue;
                    }
                    // Σ_p g_p·(A + x_p·B) = A·S0 + B·S1 with the segment's pattern:
                    // vjp(0, S0) + vjp(1, S1) − vjp(0, S1).
                    let pattern = fire.mlp.pattern(representative(lo, hi));
                    let theta = &mut grad[..self.theta];
                    fire.mlp.vjp(0.0, &g0, Some(&pattern), theta);
                    fire.mlp.vjp(1.0, &g1, Some(&pattern), theta);
                    g1.iter_mut().for_each(|v| *v = -*v);
                    fire.mlp.vjp(0.0, &g1, Some(&pattern), theta);
                }
            }
            FireFunction::Direct(_) => grad[..self.theta].copy_from_slice(&stats[..self.theta]),
        }
        let s = self.scalars();
        grad[self.theta] = stats[s];
        grad[self.theta + 1] = stats[s + 1];
        Ok(grad)
    }
}

impl AccumulateRows for FireGradPlan<'_> {
    #[inline(always)]
    fn accumulate_rows<M: Madd>(
        &self,
        head: usize,
        rows: Range<usize>,
        cols: Range<usize>,
        ds: &[f32],
        stride: usize,
        stats: &mut [f64],
    ) {
        let plan = &self.plan;
        let fire = plan.fire;
        let m = fire.capacity() as u64;
        let mut scratch = vec![0f64; fire.heads()];
        let compiled = match fire.function() {
            FireFunction::Compiled(pl) => Some(pl),
            FireFunction::Direct(_) => None,
        };
        let mut lanes = compiled.map(|pl| LANES.take().with_segments(pl.segments()));
        let mut hint = 0;
        for (r, q) in rows.enumerate() {
            let i = plan.queries[q];
            let vis = visible(plan.keys, &cols, i, plan.contiguous);
            // Keys after the query (zero in causal training; a cotangent may set them): one pair
            // at a time, at the mirrored distance of [conv.future].
            let future = &plan.keys[cols.start + vis..cols.end];
            let tail = &ds[r * stride + vis..];
            let tail = &tail[..future.len().min(tail.len())];
            // Looked for in one vectorised pass first: in causal training the whole tail is
            // zero, and a compare and branch per entry was a twentieth of a FIRE backward at
            // 128 tokens, where every tile is a diagonal one.
            if tail.iter().fold(0u32, |any, &g| any | u32::from(g != 0.0)) != 0 {
                for (&g, &j) in tail.iter().zip(future) {
                    if g != 0.0 {
                        self.pair(head, q, j - i, g, stats, &mut scratch);
                    }
                }
            }
            if vis == 0 {
                continue;
            }
            let g = &ds[r * stride..r * stride + vis];
            let p0 = plan.keys[cols.start];
            match lanes.as_mut() {
                Some(acc) if plan.contiguous && i - p0 < m => {
                    self.fast_row::<M>(q, (i - p0) as usize, g, &mut hint, acc);
                }
                _ => {
                    let keys = &plan.keys[cols.start..cols.start + vis];
                    for (&g, &j) in g.iter().zip(keys) {
                        if g != 0.0 {
                            self.pair(head, q, i - j, g, stats, &mut scratch);
                        }
                    }
                }
            }
        }
        if let (Some(pl), Some(mut acc)) = (compiled, lanes) {
            self.flush(pl, head, &mut acc, stats);
            LANES.set(acc);
        }
    }
}

/// One row's `(g, ψ, ψ')` in whole vectors: `full` of them in place, then the zero-padded
/// `last` one.
struct Row3<'a> {
    v: [&'a [[f32; PARTIALS]]; 3],
    full: usize,
    last: &'a [[f32; PARTIALS]; 3],
}

impl Row3<'_> {
    /// The columns `run` into a segment's accumulators ([`run_sums`], [`add_run`]); without
    /// `MASKED`, `run` must start at column 0 and take the whole row. A function rather than a
    /// closure so that it is compiled inside the caller's dispatch.
    #[inline(always)]
    fn sums<M: Madd, const MASKED: bool>(
        &self,
        run: Range<usize>,
        factors: (f32, f32, f32),
        acc: &mut [[f32; PARTIALS]; 4],
    ) {
        let mut sums = [[0f32; PARTIALS]; 3];
        let [gv, pv, dv] = self.v;
        let chunks = run.start / PARTIALS..run.end.div_ceil(PARTIALS);
        for c in chunks.start..chunks.end.min(self.full) {
            let v = [&gv[c], &pv[c], &dv[c]];
            run_sums::<M, MASKED>(v, c * PARTIALS, run.clone(), &mut sums);
        }
        if chunks.end > self.full {
            let [g, p, d] = self.last;
            run_sums::<M, true>([g, p, d], self.full * PARTIALS, run, &mut sums);
        }
        add_run::<M>(sums, factors, acc);
    }
}

/// One vector of a row into a run's lane-wise sums `(Σ g, Σ g·ψ, Σ g·ψ')`: the columns
/// `at..at + PARTIALS` of `(g, ψ, ψ')`, with `MASKED` those outside `run` masked out. Whole
/// vectors with a mask rather than a scalar loop over each run's ends (near the diagonal a row
/// is several short runs, and scalar updates of the lane arrays cost more than the vectors),
/// compiled inside the caller's dispatch rather than through one of their own per run.
/// Measured, every causal 64 × 64 tile of 12 heads × 2 048 tokens on one thread: 25 ms before
/// (a dispatch and masked tail loads per run, a binary search per row), 12 ms after.
#[inline(always)]
fn run_sums<M: Madd, const MASKED: bool>(
    [g, p, d]: [&[f32; PARTIALS]; 3],
    at: usize,
    run: Range<usize>,
    [a0, a1, a2]: &mut [[f32; PARTIALS]; 3],
) {
    for l in 0..PARTIALS {
        let w = if !MASKED || run.contains(&(at + l)) {
            g[l]
        } else {
            0.0
        };
        a0[l] += w;
        a1[l] = M::madd(w, p[l], a1[l]);
        a2[l] = M::madd(w, d[l], a2[l]);
    }
}

/// A run's sums into its segment's accumulators: `Σ g += a0`, `Σ g·x += a1/N`,
/// `c-term += a2/N − a1·N'_c/N²`, `m-term += a1·N'_m/N²` (`factors`: the row's
/// `(1/N, N'_c/N², N'_m/N²)`).
#[inline(always)]
fn add_run<M: Madd>(
    [a0, a1, a2]: [[f32; PARTIALS]; 3],
    (inv, dc1, dm1): (f32, f32, f32),
    acc: &mut [[f32; PARTIALS]; 4],
) {
    let [s0, s1, c, m] = acc;
    for l in 0..PARTIALS {
        s0[l] += a0[l];
        s1[l] = M::madd(inv, a1[l], s1[l]);
        c[l] = M::madd(-dc1, a1[l], M::madd(inv, a2[l], c[l]));
        m[l] = M::madd(dm1, a1[l], m[l]);
    }
}
