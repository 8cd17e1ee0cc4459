//! The bias-source abstraction of the fused kernel: an additive encoding fills one
//! `[rows, cols]` tile of one head at a time, so the `[H, N, N]` bias never exists.
//!
//! An encoding ([`TileBias`]) first builds a [`BiasPlan`] for one call's position lists: the
//! per-query and per-distance quantities it needs (FIRE's normaliser and segment thresholds,
//! a baseline's distance table), O(N·H) at most. The kernel then asks the plan for tiles.
//! spec: [conv.layout], [attn.logits]

use std::ops::Range;

use fire_vocabulary::{Position, MAX_POSITION};

use crate::error::{Error, Result};

/// An additive relative position encoding that can fill bias tiles.
pub trait TileBias: Send + Sync + std::fmt::Debug {
    /// `H`.
    fn heads(&self) -> usize;

    /// Prepares the per-call state for these positions. Keys must be non-decreasing (a KV
    /// cache is); queries are arbitrary.
    fn plan<'a>(
        &'a self,
        queries: &'a [Position],
        keys: &'a [Position],
    ) -> Result<Box<dyn BiasPlan + 'a>>;
}

/// One call's bias, ready to fill tiles.
pub trait BiasPlan: Send + Sync {
    /// Writes `b_head(queries[r], keys[c])` for `r ∈ rows`, `c ∈ cols` into `out`, row-major
    /// with row stride `stride ≥ cols.len()`. Every entry is written, including keys after the query
    /// (each encoding's own rule for them, [conv.future]); the causal kernel masks those.
    fn fill(
        &self,
        head: usize,
        rows: Range<usize>,
        cols: Range<usize>,
        out: &mut [f32],
        stride: usize,
    );

    /// [`Self::fill`] for a causal kernel: entries whose key is after the query may hold
    /// anything (the kernel masks them). The default fills them anyway; FIRE skips them, since
    /// off the causal part it has no fast path (x > 1 falls outside its distance thresholds).
    fn fill_causal(
        &self,
        head: usize,
        rows: Range<usize>,
        cols: Range<usize>,
        out: &mut [f32],
        stride: usize,
    ) {
        self.fill(head, rows, cols, out, stride);
    }

    /// [`Self::fill_causal`], except that a row may be handed back instead of written: where
    /// `affine[r]` is set to `Some(row)`, every entry of row `r` of the tile, up to `stride`
    /// (padding columns included), is [`AffineRow::at`]`(table, t)` — a multiply then an add,
    /// two roundings, exactly what the fill would have written — with `table` the slice
    /// returned; the row's [`AffineRow::written`] columns up to its last visible one are
    /// written as well. The score product then starts such a row from the table (a
    /// multiply-add per entry in registers, no pass over the tile in memory). The default
    /// writes every row and returns no table.
    fn fill_causal_affine(
        &self,
        head: usize,
        rows: Range<usize>,
        cols: Range<usize>,
        out: &mut [f32],
        stride: usize,
        affine: &mut [Option<AffineRow>],
    ) -> &[f32] {
        affine.fill(None);
        self.fill_causal(head, rows, cols, out, stride);
        &[]
    }

    /// Bytes this plan holds (its O(N) state), for the memory accounting of benchmarks.
    fn bytes(&self) -> usize;
}

/// Columns of the block of a two-piece [`AffineRow`] that holds its split, which the fill
/// writes out ([`BiasPlan::fill_causal_affine`]): every key block of the score product (16 or
/// 64 columns) lies inside one such block, so the product takes each of its blocks either
/// whole from one piece or from what the fill wrote, never lane by lane.
pub const SPLIT_BLOCK: usize = 64;

/// A row of a bias tile that is affine in a table ([`BiasPlan::fill_causal_affine`]), in up to
/// two pieces: entry `t` is `a · table[offset + t] + c` before column `split` and
/// `a2 · table[offset + t] + c2` from it on. Two pieces because a causal FIRE row away from the
/// diagonal crosses at most one breakpoint of f_θ in a tile in most cases: handed back rather
/// than written, such a row costs the score product one multiply-add per entry in registers,
/// except in the [`SPLIT_BLOCK`] columns around its split, which the fill writes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AffineRow {
    /// The slope before `split`.
    pub a: f32,
    /// The intercept before `split`.
    pub c: f32,
    /// Where column 0 reads the table.
    pub offset: usize,
    /// The first column of the second piece; `usize::MAX` for a row of one piece.
    pub split: usize,
    /// The slope from `split` on.
    pub a2: f32,
    /// The intercept from `split` on.
    pub c2: f32,
}

impl AffineRow {
    /// A row of one piece: `a · table[offset + t] + c` for every `t`.
    pub fn whole(a: f32, c: f32, offset: usize) -> Self {
        Self {
            a,
            c,
            offset,
            split: usize::MAX,
            a2: a,
            c2: c,
        }
    }

    /// The slope and intercept of column `t`.
    #[inline(always)]
    pub fn piece(&self, t: usize) -> (f32, f32) {
        if t < self.split {
            (self.a, self.c)
        } else {
            (self.a2, self.c2)
        }
    }

    /// Whether `cols` holds the split with columns of both pieces (the score product then
    /// reads those columns from the tile instead).
    #[inline(always)]
    pub fn splits(&self, cols: Range<usize>) -> bool {
        cols.start < self.split && self.split < cols.end
    }

    /// The columns the fill writes out for this row: the [`SPLIT_BLOCK`]-aligned block holding
    /// the split, up to `end` (none for one piece).
    pub fn written(&self, end: usize) -> Range<usize> {
        if self.split >= end {
            return end..end;
        }
        let start = self.split / SPLIT_BLOCK * SPLIT_BLOCK;
        start..(start + SPLIT_BLOCK).min(end)
    }

    /// Entry `t` of the row, as the fill computes it (a multiply, then an add).
    #[inline(always)]
    pub fn at(&self, table: &[f32], t: usize) -> f32 {
        let (a, c) = self.piece(t);
        a * table[self.offset + t] + c
    }
}

/// Checks both position lists ([`check_keys`] for the keys) and that no position exceeds
/// [`MAX_POSITION`] (spec: [conv.positions]); returns whether the keys are contiguous.
pub(crate) fn check_positions(queries: &[Position], keys: &[Position]) -> Result<bool> {
    if let Some(p) = queries.iter().chain(keys).find(|&&p| p > MAX_POSITION) {
        return Err(Error::Invalid {
            what: "positions".into(),
            reason: format!("position {p} is beyond 2^53 (not exact in binary64)"),
        });
    }
    check_keys(keys)
}

/// Checks a key list is non-empty and non-decreasing; returns whether it is contiguous
/// (`keys[t] = keys[0] + t`), which enables the table-walking fast paths.
pub(crate) fn check_keys(keys: &[Position]) -> Result<bool> {
    if keys.is_empty() {
        return Err(Error::Empty {
            what: "key positions".into(),
        });
    }
    if keys.windows(2).any(|w| w[1] < w[0]) {
        return Err(Error::Invalid {
            what: "key positions".into(),
            reason: "must be non-decreasing (as in a KV cache)".into(),
        });
    }
    Ok(keys.windows(2).all(|w| w[1] == w[0] + 1))
}

/// How many of `keys[cols]` (non-decreasing) are visible to a query at `i` (`j ≤ i`): they
/// form a prefix of the tile. With `contiguous` (as [`check_keys`] found the whole list) it is
/// arithmetic, not a search: it is asked once per row of every tile.
pub(crate) fn visible(
    keys: &[Position],
    cols: &Range<usize>,
    i: Position,
    contiguous: bool,
) -> usize {
    if contiguous {
        let first = keys[cols.start];
        // j = first + t ≤ i for t < i − first + 1.
        (i + 1).saturating_sub(first).min(cols.len() as Position) as usize
    } else {
        keys[cols.clone()].partition_point(|&j| j <= i)
    }
}
