//! Sandwich (Chi et al., 2023): the inner product of two sinusoidal position embeddings used as
//! a bias, in the FIRE paper's form and in the centred, per-head-scaled form of NeMo.

use nalgebra::DVector;

use crate::baselines::{all_positive, per_head};
use crate::bias::{AdditiveBias, Pair};
use crate::error::{checked, Error, Result};
use crate::positions::distance;

/// The base of the sinusoidal embedding.
pub const BASE: f64 = 10000.0;

/// `ω = 10000^(−k/d)`, the frequency of term `k` of a `d`-dimensional embedding.
/// spec: [sandwich.paper], [sandwich.centred]
pub fn frequency(k: u32, d: f64) -> f64 {
    BASE.powf(-f64::from(k) / d)
}

/// Sandwich as the FIRE paper writes it: `b_h(i, j) = r1_h·Σ_{k=1..r2} cos((i − j)·10000^(−k/d'))`.
/// spec: [sandwich.paper]
#[derive(Debug, Clone, PartialEq)]
pub struct SandwichPaper {
    /// `r1_h > 0`, one scale per head.
    pub r1: Vec<f64>,
    /// `r2 ≥ 1`, the number of cosine terms (shared by all heads).
    pub r2: u32,
    /// `d' > 0`, the embedding dimension in the frequency (shared by all heads).
    pub dim: f64,
}

impl SandwichPaper {
    /// `Σ_{k=1..r2} cos(n·ω_k)` in ascending k. spec: [sandwich.paper]
    pub fn cosine_sum(&self, n: f64) -> f64 {
        (1..=self.r2)
            .map(|k| (n * frequency(k, self.dim)).cos())
            .sum()
    }
}

impl AdditiveBias for SandwichPaper {
    fn heads(&self) -> usize {
        self.r1.len()
    }

    /// spec: [sandwich.paper], [num.errors]
    fn validate(&self) -> Result<()> {
        per_head("Sandwich r1", self.r1.len(), None)?;
        all_positive("Sandwich r1", &self.r1)?;
        if self.r2 == 0 {
            return Err(Error::Invalid {
                what: "Sandwich r2".into(),
                reason: "the number of cosine terms must be >= 1".into(),
            });
        }
        checked("Sandwich d'", self.dim, self.dim > 0.0, "d' > 0")?;
        Ok(())
    }

    /// spec: [sandwich.paper], [conv.future]
    fn bias(&self, pair: Pair) -> DVector<f64> {
        let s = self.cosine_sum(distance(pair.i, pair.j).abs());
        DVector::from_iterator(self.r1.len(), self.r1.iter().map(|&r| r * s))
    }
}

/// Sandwich as NeMo computes it, for head `h = 1..H` of dimension `d`:
/// `b_h(i, j) = (Σ_{k=1..d/2} cos((i − j)·10000^(−2k/d)) − d/2) / (8h/H)`. spec: [sandwich.centred]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandwichCentred {
    /// H ≥ 1.
    pub heads: usize,
    /// The head dimension `d`: even, ≥ 2.
    pub head_dim: u32,
}

impl SandwichCentred {
    /// `Σ_{k=1..d/2} cos(n·10000^(−2k/d))` in ascending k. spec: [sandwich.centred]
    pub fn cosine_sum(&self, n: f64) -> f64 {
        let d = f64::from(self.head_dim);
        (1..=self.head_dim / 2)
            .map(|k| (n * frequency(2 * k, d)).cos())
            .sum()
    }

    /// The divisor `8h/H` of head `h` (1-based). spec: [sandwich.centred]
    pub fn scale(&self, h: usize) -> f64 {
        (h as f64 * 8.0) / self.heads as f64
    }

    /// The centring shift `d/2`. spec: [sandwich.centred]
    pub fn shift(&self) -> f64 {
        f64::from(self.head_dim) / 2.0
    }
}

impl AdditiveBias for SandwichCentred {
    fn heads(&self) -> usize {
        self.heads
    }

    /// spec: [sandwich.centred], [num.errors]
    fn validate(&self) -> Result<()> {
        per_head("Sandwich heads", self.heads, None)?;
        if self.head_dim < 2 || !self.head_dim.is_multiple_of(2) {
            return Err(Error::Invalid {
                what: "Sandwich head dimension".into(),
                reason: format!("must be even and >= 2, got {}", self.head_dim),
            });
        }
        Ok(())
    }

    /// spec: [sandwich.centred], [conv.future]
    fn bias(&self, pair: Pair) -> DVector<f64> {
        let s = self.cosine_sum(distance(pair.i, pair.j).abs()) - self.shift();
        DVector::from_fn(self.heads, |h, _| s / self.scale(h + 1))
    }
}
