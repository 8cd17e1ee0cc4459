//! A bias given by a table over distances, `b_h(i, j) = T[h, |i − j|]`: how every
//! distance-only encoding (Alibi, Kerple, T5, Sandwich) trains through the fused kernel.
//!
//! The model computes the table `[H, capacity]` with its own differentiable code (one row of
//! its bias per distance, O(N·H)), the kernel reads it per tile, and the backward pass hands
//! back its gradient: `∂L/∂T[h, n] = Σ_{|i − j| = n} dS[h, i, j]`, summed tile by tile. Autograd
//! then carries that small gradient to the encoding's parameters, so the encodings need no
//! hand-written derivative. Keys after the query read the same `|i − j|` entry; causal
//! attention masks them. spec: [attn.logits], [grad.vjp]

use std::ops::Range;

use fire_vocabulary::Position;

use crate::backward::{dispatch_accumulate, AccumulateRows, GradPlan};
use crate::error::{shape, Error, Result};
use crate::simd::Madd;
use crate::tile::{check_positions, visible, AffineRow, BiasPlan, TileBias};

/// `T[h, n]` for `n < capacity`, f32, head-major.
#[derive(Debug, Clone, PartialEq)]
pub struct DistanceTable {
    heads: usize,
    capacity: usize,
    table: Vec<f32>,
}

impl DistanceTable {
    /// A table `[heads, capacity]` (row-major, finite values).
    pub fn new(heads: usize, capacity: usize, table: Vec<f32>) -> Result<Self> {
        if heads == 0 || capacity == 0 {
            return Err(Error::Empty {
                what: "distance table".into(),
            });
        }
        if table.len() != heads * capacity {
            return Err(shape(
                "distance table [H, capacity]",
                heads * capacity,
                table.len(),
            ));
        }
        if let Some(bad) = table.iter().position(|v| !v.is_finite()) {
            return Err(Error::Parameter {
                name: format!("distance table entry {bad}"),
                reason: "must be finite".into(),
            });
        }
        Ok(Self {
            heads,
            capacity,
            table,
        })
    }

    /// The plan with its gradient (the [`TileBias::plan`] of training).
    pub fn grad_plan<'a>(
        &'a self,
        queries: &'a [Position],
        keys: &'a [Position],
    ) -> Result<Box<dyn GradPlan + 'a>> {
        Ok(Box::new(self.table_plan(queries, keys)?))
    }

    /// The plan behind both [`Self::grad_plan`] and [`TileBias::plan`].
    fn table_plan<'a>(
        &'a self,
        queries: &'a [Position],
        keys: &'a [Position],
    ) -> Result<TablePlan<'a>> {
        let contiguous = check_positions(queries, keys)?;
        let lo = queries.iter().chain(keys).copied().min().unwrap_or(0);
        let hi = queries.iter().chain(keys).copied().max().unwrap_or(0);
        if hi - lo >= self.capacity as u64 {
            return Err(Error::Invalid {
                what: "distance table".into(),
                reason: format!(
                    "distance {} is past the table's {} entries",
                    hi - lo,
                    self.capacity
                ),
            });
        }
        // With contiguous keys a causal row of a tile reads consecutive distances downwards:
        // a slice of the row reversed.
        let rev = if contiguous {
            self.table
                .chunks_exact(self.capacity)
                .flat_map(|row| row.iter().rev().copied())
                .collect()
        } else {
            Vec::new()
        };
        Ok(TablePlan {
            table: self,
            queries,
            keys,
            contiguous,
            rev,
        })
    }
}

impl TileBias for DistanceTable {
    fn heads(&self) -> usize {
        self.heads
    }

    fn plan<'a>(
        &'a self,
        queries: &'a [Position],
        keys: &'a [Position],
    ) -> Result<Box<dyn BiasPlan + 'a>> {
        Ok(Box::new(self.table_plan(queries, keys)?))
    }
}

struct TablePlan<'a> {
    table: &'a DistanceTable,
    queries: &'a [Position],
    keys: &'a [Position],
    /// Whether the keys are contiguous (`keys[t] = keys[0] + t`).
    contiguous: bool,
    /// With contiguous keys, each head's row reversed: `rev[h·cap + cap − 1 − n] = T[h, n]`.
    rev: Vec<f32>,
}

impl TablePlan<'_> {
    fn row(&self, head: usize) -> &[f32] {
        let cap = self.table.capacity;
        &self.table.table[head * cap..(head + 1) * cap]
    }

    /// The causal fill with contiguous keys: row `r` (query `i`, `nhi = i − keys[cols.start]`)
    /// is `rev[h·cap + cap − 1 − nhi ..]` over its visible prefix. With `affine`, a row whose
    /// whole stride the reversed row holds (`stride ≤ nhi + 1`) is handed back as
    /// `1·rev[offset + t] + (−0)` — exactly `rev[offset + t]`, signed zeros included — and
    /// not written.
    fn fill_contiguous(
        &self,
        head: usize,
        rows: Range<usize>,
        cols: Range<usize>,
        out: &mut [f32],
        stride: usize,
        mut affine: Option<&mut [Option<AffineRow>]>,
    ) {
        let cap = self.table.capacity;
        let p0 = self.keys[cols.start];
        for (r, q) in rows.enumerate() {
            let i = self.queries[q];
            let vis = visible(self.keys, &cols, i, true);
            if let Some(affine) = affine.as_deref_mut() {
                affine[r] = None;
            }
            if vis == 0 {
                continue;
            }
            // The plan holds every distance of the positions (checked when it was built).
            let nhi = (i - p0) as usize;
            let offset = head * cap + cap - 1 - nhi;
            if let (Some(affine), true) = (affine.as_deref_mut(), stride <= nhi + 1) {
                affine[r] = Some(AffineRow::whole(1.0, -0.0, offset));
                continue;
            }
            out[r * stride..r * stride + vis].copy_from_slice(&self.rev[offset..offset + vis]);
        }
    }

    /// The pairs whose key is after the query, one at a time (at `|i − j|`, [conv.future]).
    fn accumulate_future(
        &self,
        acc: &mut [f64],
        queries: &[Position],
        cols: Range<usize>,
        ds: &[f32],
        stride: usize,
    ) {
        for (r, &i) in queries.iter().enumerate() {
            let vis = visible(self.keys, &cols, i, true);
            let keys = &self.keys[cols.start + vis..cols.end];
            for (&g, &j) in ds[r * stride + vis..r * stride + cols.len()]
                .iter()
                .zip(keys)
            {
                if g != 0.0 {
                    acc[(j - i) as usize] += f64::from(g);
                }
            }
        }
    }
}

/// [`GradPlan::accumulate`] with contiguous keys, for the causal part: each row adds its `dS`
/// into a tile-local buffer over the tile's distances (reversed, so a row is one vector add),
/// which goes into the f64 statistics once per tile; keys after the query (zero in causal
/// training) one at a time at `|i − j|`.
impl AccumulateRows for TablePlan<'_> {
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
        let cap = self.table.capacity;
        let acc = &mut stats[head * cap..(head + 1) * cap];
        let p0 = self.keys[cols.start];
        let queries = &self.queries[rows];
        // Distances of the visible pairs lie in (lo, hi]: the buffer holds hi − d at index d'.
        let seen = || {
            queries
                .iter()
                .filter(|&&i| i >= p0)
                .map(|&i| (i - p0) as usize)
        };
        let (Some(hi), Some(low)) = (seen().max(), seen().min()) else {
            return self.accumulate_future(acc, queries, cols, ds, stride);
        };
        let mut buf = vec![0f32; hi - low + cols.len()];
        for (r, &i) in queries.iter().enumerate() {
            let vis = visible(self.keys, &cols, i, true);
            if vis == 0 {
                continue;
            }
            let at = hi - (i - p0) as usize;
            let g = &ds[r * stride..r * stride + vis];
            for (b, &g) in buf[at..at + vis].iter_mut().zip(g) {
                *b += g;
            }
        }
        for (k, &b) in buf.iter().enumerate().filter(|(k, _)| *k <= hi) {
            acc[hi - k] += f64::from(b);
        }
        self.accumulate_future(acc, queries, cols, ds, stride);
    }
}

impl BiasPlan for TablePlan<'_> {
    fn fill(
        &self,
        head: usize,
        rows: Range<usize>,
        cols: Range<usize>,
        out: &mut [f32],
        stride: usize,
    ) {
        let t = self.row(head);
        let width = cols.len();
        for (r, q) in rows.enumerate() {
            let i = self.queries[q];
            let row = &mut out[r * stride..r * stride + width];
            for (o, &j) in row.iter_mut().zip(&self.keys[cols.clone()]) {
                *o = t[i.abs_diff(j) as usize];
            }
        }
    }

    fn fill_causal(
        &self,
        head: usize,
        rows: Range<usize>,
        cols: Range<usize>,
        out: &mut [f32],
        stride: usize,
    ) {
        if self.contiguous {
            self.fill_contiguous(head, rows, cols, out, stride, None);
        } else {
            self.fill(head, rows, cols, out, stride);
        }
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
        if !self.contiguous {
            affine.fill(None);
            self.fill(head, rows, cols, out, stride);
            return &[];
        }
        self.fill_contiguous(head, rows, cols, out, stride, Some(affine));
        &self.rev
    }

    fn bytes(&self) -> usize {
        4 * self.rev.len()
    }
}

impl GradPlan for TablePlan<'_> {
    fn as_bias(&self) -> &dyn BiasPlan {
        self
    }

    fn stats_len(&self) -> usize {
        self.table.table.len()
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
        if self.contiguous {
            // Under the SIMD dispatch: the row adds are its vector loop.
            return dispatch_accumulate(self, head, rows, cols, ds, stride, stats);
        }
        let cap = self.table.capacity;
        let acc = &mut stats[head * cap..(head + 1) * cap];
        for (r, q) in rows.enumerate() {
            let i = self.queries[q];
            let keys = &self.keys[cols.clone()];
            for (&g, &j) in ds[r * stride..r * stride + cols.len()].iter().zip(keys) {
                acc[i.abs_diff(j) as usize] += f64::from(g);
            }
        }
    }

    fn gradient(&self, stats: &[f64]) -> Result<Vec<f64>> {
        Ok(stats.to_vec())
    }
}
