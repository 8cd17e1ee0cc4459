//! The paper's baseline additive encodings as tile bias sources: every one is a function of the
//! distance `n = i − j` and the head only, so it is tabulated once per distance (O(N·H)) and a
//! tile row is a copy from the table. NoPE is the zero bias (and the kernel also has a no-bias
//! path, so both can be measured).
//!
//! Keys after the query: Alibi, Kerple and Sandwich read `|i − j|`; T5's unidirectional
//! bucketing maps every `j > i` to distance 0. spec: [conv.future]

use std::ops::Range;

use fire_vocabulary::Position;

use crate::device::{DeviceBias, DeviceTables};
use crate::error::{finite, Error, Result};
use crate::tile::{check_positions, visible, BiasPlan, TileBias};

/// A distance-only encoding `b_h(n)`.
#[derive(Debug, Clone, PartialEq)]
pub enum DistanceEncoding {
    /// Zero everywhere.
    Nope,
    /// `−r_h·n`, `r_h` per head.
    Alibi {
        /// One slope per head.
        slopes: Vec<f64>,
    },
    /// `−r1_h·ln(1 + r2_h·n)`.
    KerpleLog {
        /// One r1 per head.
        r1: Vec<f64>,
        /// One r2 per head.
        r2: Vec<f64>,
    },
    /// `−r1_h·n^{r2_h}`.
    KerplePower {
        /// One r1 per head.
        r1: Vec<f64>,
        /// One r2 per head (0 < r2 ≤ 2).
        r2: Vec<f64>,
    },
    /// T5's official unidirectional log-binned buckets; `table[h·buckets + bucket]`.
    T5 {
        /// Number of buckets (the official default is 32).
        buckets: usize,
        /// Distances at or beyond this share the last bucket (the default is 128).
        max_distance: u64,
        /// `[H, buckets]` learnt scalars.
        table: Vec<f64>,
    },
    /// NeMo's Sandwich: `(Σ_{k=1}^{d/2} cos(n / 10000^{2k/d}) − d/2) / (h·8/H)`, h 1-based.
    Sandwich {
        /// `H`.
        heads: usize,
        /// The sinusoid dimension `d` (even).
        dim: usize,
    },
}

/// Alibi's standard slopes for `heads` heads: 2^(−8h/H), h = 1..H, for a power of two H;
/// otherwise those of the closest lower power of two P, then every other slope of the 2P
/// sequence. Each slope is computed from its exact dyadic exponent (not as a repeated product
/// of the first, which drifts in the last bits).
pub fn alibi_slopes(heads: usize) -> Vec<f64> {
    fn power_of_two(n: usize) -> Vec<f64> {
        (1..=n)
            .map(|h| 2f64.powf(-8.0 * h as f64 / n as f64))
            .collect()
    }
    if heads == 0 {
        return Vec::new();
    }
    if heads.is_power_of_two() {
        return power_of_two(heads);
    }
    let p = 1usize << (usize::BITS - 1 - heads.leading_zeros());
    let mut slopes = power_of_two(p);
    slopes.extend(power_of_two(2 * p).into_iter().step_by(2).take(heads - p));
    slopes
}

/// T5's official unidirectional bucket of the causal distance `n = max(i − j, 0)`: `n` if
/// `n < N/2`, else `min(N − 1, N/2 + ⌊ln(n/(N/2)) / ln(D/(N/2)) · (N − N/2)⌋)` for `N` buckets
/// and maximum distance `D`, computed in binary32 as the official code does (the ratio, its
/// logarithm and the product are f32; the constant ln(D/(N/2)) is rounded once to f32).
/// spec: [t5.bucket.official], [t5.bucket.official.float]
pub fn t5_bucket(n: u64, buckets: usize, max_distance: u64) -> usize {
    let max_exact = (buckets / 2) as u64;
    if n < max_exact {
        return n as usize;
    }
    let ratio = n as f32 / max_exact as f32;
    let log = f64::from(ratio).ln() as f32;
    let span = (max_distance as f64 / max_exact as f64).ln() as f32;
    let scaled = (log / span) * (buckets as u64 - max_exact) as f32;
    (max_exact + scaled as u64).min(buckets as u64 - 1) as usize
}

impl DistanceEncoding {
    /// `H`, or `None` for NoPE (any number of heads).
    fn declared_heads(&self) -> Option<usize> {
        match self {
            DistanceEncoding::Nope => None,
            DistanceEncoding::Alibi { slopes } => Some(slopes.len()),
            DistanceEncoding::KerpleLog { r1, .. } | DistanceEncoding::KerplePower { r1, .. } => {
                Some(r1.len())
            }
            DistanceEncoding::T5 { buckets, table, .. } => Some(table.len() / (*buckets).max(1)),
            DistanceEncoding::Sandwich { heads, .. } => Some(*heads),
        }
    }

    fn validate(&self) -> Result<()> {
        let bad = |name: &str, reason: String| {
            Err(Error::Parameter {
                name: name.into(),
                reason,
            })
        };
        match self {
            DistanceEncoding::Nope => Ok(()),
            // spec: [alibi.bias] — slopes finite and > 0.
            DistanceEncoding::Alibi { slopes } => slopes.iter().try_for_each(|&v| {
                finite("alibi slope", v)?;
                if v > 0.0 {
                    Ok(())
                } else {
                    bad("alibi slope", format!("must be > 0, got {v}"))
                }
            }),
            // spec: [kerple.params] — r1, r2 finite and > 0; the power form's r2 ≤ 2.
            DistanceEncoding::KerpleLog { r1, r2 } | DistanceEncoding::KerplePower { r1, r2 } => {
                if r1.len() != r2.len() {
                    return bad(
                        "kerple r2",
                        format!("{} values for {} heads", r2.len(), r1.len()),
                    );
                }
                let power = matches!(self, DistanceEncoding::KerplePower { .. });
                r1.iter().chain(r2).try_for_each(|&v| {
                    finite("kerple parameter", v)?;
                    if v > 0.0 {
                        Ok(())
                    } else {
                        bad("kerple parameter", format!("must be > 0, got {v}"))
                    }
                })?;
                match r2.iter().find(|&&v| power && v > 2.0) {
                    Some(v) => bad("kerple power r2", format!("must be <= 2, got {v}")),
                    None => Ok(()),
                }
            }
            DistanceEncoding::T5 {
                buckets,
                max_distance,
                table,
            } => {
                if *buckets < 2 || !table.len().is_multiple_of(*buckets) {
                    return bad(
                        "t5 table",
                        format!("{} values for {buckets} buckets", table.len()),
                    );
                }
                if *max_distance <= (buckets / 2) as u64 {
                    return bad("t5 max_distance", "must exceed buckets / 2".into());
                }
                table
                    .iter()
                    .try_for_each(|&v| finite("t5 bias", v).map(|_| ()))
            }
            DistanceEncoding::Sandwich { dim, .. } => {
                if *dim == 0 || !dim.is_multiple_of(2) {
                    return bad("sandwich dim", format!("must be even and > 0, got {dim}"));
                }
                Ok(())
            }
        }
    }

    /// `b_h(n)` in f64, literally.
    pub fn value(&self, h: usize, n: u64) -> f64 {
        let nf = n as f64;
        match self {
            DistanceEncoding::Nope => 0.0,
            DistanceEncoding::Alibi { slopes } => -slopes[h] * nf,
            DistanceEncoding::KerpleLog { r1, r2 } => -r1[h] * (r2[h] * nf).ln_1p(),
            DistanceEncoding::KerplePower { r1, r2 } => -r1[h] * nf.powf(r2[h]),
            DistanceEncoding::T5 {
                buckets,
                max_distance,
                table,
            } => table[h * buckets + t5_bucket(n, *buckets, *max_distance)],
            DistanceEncoding::Sandwich { heads, dim } => {
                let half = dim / 2;
                let sum: f64 = (1..=half)
                    .map(|k| (nf / 10000f64.powf(2.0 * k as f64 / *dim as f64)).cos())
                    .sum();
                (sum - half as f64) / ((h + 1) as f64 * 8.0 / *heads as f64)
            }
        }
    }

    /// The distance a key after the query is read at.
    fn future_distance(&self, n: u64) -> u64 {
        match self {
            DistanceEncoding::T5 { .. } => 0,
            _ => n,
        }
    }
}

/// A distance-only encoding tabulated for distances below a capacity.
#[derive(Debug, Clone)]
pub struct DistanceBias {
    encoding: DistanceEncoding,
    heads: usize,
    capacity: usize,
    /// `[H, capacity]`, each head reversed: `table[h·cap + cap − 1 − n] = b_h(n)`.
    table: Vec<f32>,
}

impl DistanceBias {
    /// Tabulates `encoding` for `heads` heads and distances below `capacity`.
    pub fn new(encoding: DistanceEncoding, heads: usize, capacity: usize) -> Result<Self> {
        encoding.validate()?;
        if let Some(h) = encoding.declared_heads() {
            if h != heads {
                return Err(Error::Shape {
                    what: "encoding heads".into(),
                    expected: heads.to_string(),
                    got: h.to_string(),
                });
            }
        }
        if heads == 0 {
            return Err(Error::Empty {
                what: "heads".into(),
            });
        }
        let capacity = capacity.max(1);
        let mut table = Vec::with_capacity(heads * capacity);
        for h in 0..heads {
            table.extend(
                (0..capacity as u64)
                    .rev()
                    .map(|n| encoding.value(h, n) as f32),
            );
        }
        Ok(Self {
            encoding,
            heads,
            capacity,
            table,
        })
    }

    /// The encoding.
    pub fn encoding(&self) -> &DistanceEncoding {
        &self.encoding
    }

    fn at(&self, h: usize, n: u64) -> f32 {
        if (n as usize) < self.capacity {
            self.table[h * self.capacity + self.capacity - 1 - n as usize]
        } else {
            self.encoding.value(h, n) as f32
        }
    }
}

impl DeviceTables for DistanceBias {
    fn device_bias(&self, _queries: &[Position], distances: usize) -> Option<DeviceBias> {
        let mut table = Vec::with_capacity(self.heads * distances);
        for h in 0..self.heads {
            table.extend((0..distances as u64).map(|n| self.at(h, n)));
        }
        Some(DeviceBias::Table {
            heads: self.heads,
            capacity: distances,
            table,
        })
    }
}

impl TileBias for DistanceBias {
    fn heads(&self) -> usize {
        self.heads
    }

    fn plan<'a>(
        &'a self,
        queries: &'a [Position],
        keys: &'a [Position],
    ) -> Result<Box<dyn BiasPlan + 'a>> {
        let contiguous = check_positions(queries, keys)?;
        Ok(Box::new(DistancePlan {
            bias: self,
            queries,
            keys,
            contiguous,
        }))
    }
}

struct DistancePlan<'a> {
    bias: &'a DistanceBias,
    queries: &'a [Position],
    keys: &'a [Position],
    contiguous: bool,
}

impl BiasPlan for DistancePlan<'_> {
    fn fill(
        &self,
        head: usize,
        rows: Range<usize>,
        cols: Range<usize>,
        out: &mut [f32],
        stride: usize,
    ) {
        let width = cols.len();
        let cap = self.bias.capacity;
        let table = &self.bias.table[head * cap..(head + 1) * cap];
        for (r, q) in rows.enumerate() {
            let i = self.queries[q];
            let row = &mut out[r * stride..r * stride + width];
            let vis = visible(self.keys, &cols, i, self.contiguous);
            let p0 = self.keys[cols.start];
            if self.contiguous && vis > 0 && i - p0 < cap as u64 {
                let base = cap - 1 - (i - p0) as usize;
                row[..vis].copy_from_slice(&table[base..base + vis]);
            } else {
                for (o, &j) in row[..vis].iter_mut().zip(&self.keys[cols.start..]) {
                    *o = self.bias.at(head, i - j);
                }
            }
            for (o, &j) in row[vis..].iter_mut().zip(&self.keys[cols.start + vis..]) {
                *o = self
                    .bias
                    .at(head, self.bias.encoding.future_distance(j - i));
            }
        }
    }

    fn bytes(&self) -> usize {
        0
    }
}
