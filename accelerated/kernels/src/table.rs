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

use crate::backward::GradPlan;
use crate::error::{shape, Error, Result};
use crate::tile::{check_positions, BiasPlan, TileBias};

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
        check_positions(queries, keys)?;
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
        Ok(Box::new(TablePlan {
            table: self,
            queries,
            keys,
        }))
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
        let plan = self.grad_plan(queries, keys)?;
        Ok(Box::new(Forward(plan)))
    }
}

/// A grad plan used as a forward plan only.
struct Forward<'a>(Box<dyn GradPlan + 'a>);

impl BiasPlan for Forward<'_> {
    fn fill(
        &self,
        head: usize,
        rows: Range<usize>,
        cols: Range<usize>,
        out: &mut [f32],
        stride: usize,
    ) {
        self.0.fill(head, rows, cols, out, stride);
    }
    fn bytes(&self) -> usize {
        self.0.bytes()
    }
}

struct TablePlan<'a> {
    table: &'a DistanceTable,
    queries: &'a [Position],
    keys: &'a [Position],
}

impl TablePlan<'_> {
    fn row(&self, head: usize) -> &[f32] {
        let cap = self.table.capacity;
        &self.table.table[head * cap..(head + 1) * cap]
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

    fn bytes(&self) -> usize {
        0
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
