//! T5's official log-binned bucketing (mesh-tensorflow `_relative_position_bucket`, ported
//! unchanged to Hugging Face), with its binary32 arithmetic kept exactly, and its reduction to
//! the general bucketed form: on the causal domain it is [`T5Buckets`] with derived boundaries.

use nalgebra::DVector;

use crate::baselines::t5::{validate_values, T5Buckets};
use crate::bias::{AdditiveBias, Pair};
use crate::error::{Error, Result};
use crate::positions::{Position, MAX_POSITION};

/// One run of distances sharing a bucket: every `n ≥ start` up to the next segment's start.
/// spec: [t5.official.boundaries]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// The smallest distance of the run.
    pub start: u64,
    /// The official bucket id of the run (before the bidirectional offset).
    pub bucket: u32,
}

/// The official bucketing's three hyper-parameters, validated, with the boundaries they imply.
/// spec: [t5.bucket.official]
#[derive(Debug, Clone, PartialEq)]
pub struct OfficialBucketing {
    num_buckets: u32,
    max_distance: u64,
    bidirectional: bool,
    segments: Vec<Segment>,
}

impl OfficialBucketing {
    /// T5's defaults: 32 buckets, max distance 128. spec: [t5.bucket.official]
    pub const DEFAULT_NUM_BUCKETS: u32 = 32;
    /// T5's default max distance. spec: [t5.bucket.official]
    pub const DEFAULT_MAX_DISTANCE: u64 = 128;

    /// Validates the parameters and derives the boundaries. spec: [t5.bucket.official],
    /// [t5.official.boundaries], [num.errors]
    pub fn new(num_buckets: u32, max_distance: u64, bidirectional: bool) -> Result<Self> {
        let what = || "T5 num_buckets".to_owned();
        if bidirectional && (num_buckets < 4 || !num_buckets.is_multiple_of(2)) {
            return Err(Error::Invalid {
                what: what(),
                reason: format!(
                    "bidirectional bucketing needs an even num_buckets >= 4 (half per direction), got {num_buckets}"
                ),
            });
        }
        if !bidirectional && num_buckets < 2 {
            return Err(Error::Invalid {
                what: what(),
                reason: format!("num_buckets must be >= 2, got {num_buckets}"),
            });
        }
        let mut out = Self {
            num_buckets,
            max_distance,
            bidirectional,
            segments: Vec::new(),
        };
        if max_distance <= u64::from(out.max_exact()) {
            return Err(Error::Invalid {
                what: "T5 max_distance".into(),
                reason: format!(
                    "max_distance = {max_distance} must exceed max_exact = {} (else log(max_distance / max_exact) <= 0)",
                    out.max_exact()
                ),
            });
        }
        out.segments = out.derive_segments();
        Ok(out)
    }

    /// The T5 defaults (32 buckets, max distance 128). spec: [t5.bucket.official]
    pub fn t5_default(bidirectional: bool) -> Self {
        Self::new(
            Self::DEFAULT_NUM_BUCKETS,
            Self::DEFAULT_MAX_DISTANCE,
            bidirectional,
        )
        .unwrap_or_else(|_| unreachable!("the T5 defaults are valid"))
    }

    /// `num_buckets` as given.
    pub fn num_buckets(&self) -> u32 {
        self.num_buckets
    }

    /// `max_distance` as given.
    pub fn max_distance(&self) -> u64 {
        self.max_distance
    }

    /// Whether keys after the query get their own half of the buckets.
    pub fn bidirectional(&self) -> bool {
        self.bidirectional
    }

    /// B: the buckets of one direction (`num_buckets / 2` when bidirectional).
    /// spec: [t5.bucket.official]
    pub fn side_buckets(&self) -> u32 {
        if self.bidirectional {
            self.num_buckets / 2
        } else {
            self.num_buckets
        }
    }

    /// `max_exact = ⌊B / 2⌋`: distances below it get a bucket each. spec: [t5.bucket.official]
    pub fn max_exact(&self) -> u32 {
        self.side_buckets() / 2
    }

    /// The bucket of a non-negative distance `n` by the official binary32 formula, literally.
    /// spec: [t5.bucket.official.float]
    pub fn formula_bucket(&self, n: u64) -> u32 {
        let b = self.side_buckets();
        let e = self.max_exact();
        if n < u64::from(e) {
            // n < e ≤ u32::MAX.
            return u32::try_from(n).unwrap_or(u32::MAX);
        }
        let ratio = (n as f32) / (e as f32);
        let log = log_binary32(ratio);
        let span = ((self.max_distance as f64) / f64::from(e)).ln() as f32;
        let scaled = (log / span) * ((b - e) as f32);
        self.log_bucket(f64::from(scaled))
    }

    /// `min(B − 1, E + trunc(t))` for the log-binned value `t ≥ 0` (saturating).
    fn log_bucket(&self, t: f64) -> u32 {
        let (b, e) = (self.side_buckets(), self.max_exact());
        // Truncation toward zero; `t ≥ 0`, and `as` saturates instead of overflowing.
        let large = u64::from(e).saturating_add(t as u64);
        u32::try_from(large.min(u64::from(b - 1))).unwrap_or(b - 1)
    }

    /// The bucket of distance `n` in each arithmetic a faithful port may compute in: the
    /// normative binary32 one, binary32 with the divisions done as multiplications by the
    /// binary32 reciprocal (what XLA and GPU kernels do) or with `(B − E)/δ` folded into one
    /// constant, each with a logarithm one ulp either side of the correctly rounded one
    /// (vectorised float32 logs are accurate to about one ulp, not correctly rounded), and
    /// binary64. Sorted, without repeats: more than one bucket marks a *fragile* distance, one
    /// whose bucket the port's float32 library decides. spec: [t5.bucket.official.float]
    pub fn arithmetic_buckets(&self, n: u64) -> Vec<u32> {
        let (b, e) = (self.side_buckets(), self.max_exact());
        if n < u64::from(e) {
            return vec![self.formula_bucket(n)];
        }
        let span64 = ((self.max_distance as f64) / f64::from(e)).ln();
        let (span, width) = (span64 as f32, (b - e) as f32);
        let mut out =
            vec![self.log_bucket((n as f64 / f64::from(e)).ln() / span64 * f64::from(b - e))];
        for ratio in [(n as f32) / (e as f32), (n as f32) * (1.0 / (e as f32))] {
            let log = log_binary32(ratio);
            for log in [log, next_down(log), next_up(log)] {
                for t in [
                    (log / span) * width,
                    (log * (1.0 / span)) * width,
                    log * (width / span),
                ] {
                    out.push(self.log_bucket(f64::from(t)));
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The segments of one direction: derived once, as the smallest distance of each
    /// non-empty bucket. spec: [t5.official.boundaries]
    fn derive_segments(&self) -> Vec<Segment> {
        let mut out: Vec<Segment> = Vec::new();
        for b in 0..self.side_buckets() {
            let Some(start) = self.first_distance_in(b) else {
                break;
            };
            match out.last_mut() {
                Some(last) if last.start == start => last.bucket = b,
                _ => out.push(Segment { start, bucket: b }),
            }
        }
        out
    }

    /// `min{n ≤ 2^53 : formula_bucket(n) ≥ b}` by bisection (the formula is non-decreasing in
    /// n, every step of it being monotone), or `None` if no position reaches bucket `b`.
    fn first_distance_in(&self, b: u32) -> Option<u64> {
        if self.formula_bucket(MAX_POSITION) < b {
            return None;
        }
        let (mut lo, mut hi) = (0u64, MAX_POSITION);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.formula_bucket(mid) >= b {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Some(lo)
    }

    /// The derived segments (one per non-empty bucket of one direction).
    /// spec: [t5.official.boundaries]
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// The derived boundaries `0 = l_0 < l_1 < …` of the general form. spec: [t5.official.boundaries]
    pub fn boundaries(&self) -> Vec<u64> {
        self.segments.iter().map(|s| s.start).collect()
    }

    /// The bucket of a non-negative distance through the derived boundaries.
    /// spec: [t5.official.boundaries]
    pub fn distance_bucket(&self, n: u64) -> u32 {
        // k(n) = max{k : l_k ≤ n}; segment 0 starts at 0, so the index exists.
        let k = self
            .segments
            .partition_point(|s| s.start <= n)
            .saturating_sub(1);
        self.segments[k].bucket
    }

    /// The official bucket of `relative_position = key − query` (mesh-tensorflow's argument).
    /// spec: [t5.bucket.official], [t5.future]
    pub fn bucket(&self, relative_position: i64) -> u32 {
        let n = relative_position.checked_neg().unwrap_or(i64::MAX);
        if self.bidirectional {
            let offset = if n < 0 { self.side_buckets() } else { 0 };
            offset + self.distance_bucket(n.unsigned_abs())
        } else {
            self.distance_bucket(u64::try_from(n.max(0)).unwrap_or(0))
        }
    }

    /// The bucket of query `i` and key `j`. spec: [t5.bucket.official]
    pub fn bucket_of(&self, i: Position, j: Position) -> u32 {
        // Positions are ≤ 2^53 (checked by `evaluate`), so both fit in i64.
        let rel = i64::try_from(j).unwrap_or(i64::MAX) - i64::try_from(i).unwrap_or(i64::MAX);
        self.bucket(rel)
    }
}

/// The next binary32 value toward +∞ (finite, positive inputs).
fn next_up(x: f32) -> f32 {
    f32::from_bits(x.to_bits() + 1)
}

/// The next binary32 value toward 0 (finite, positive inputs).
fn next_down(x: f32) -> f32 {
    if x > 0.0 {
        f32::from_bits(x.to_bits() - 1)
    } else {
        x
    }
}

/// The binary32 natural logarithm, correctly rounded in all but astronomically rare cases: the
/// binary64 logarithm rounded once to binary32. spec: [t5.bucket.official.float]
pub fn log_binary32(x: f32) -> f32 {
    (f64::from(x)).ln() as f32
}

/// T5 RPE with the official bucketing: `b_h(i, j) = r_{h, bucket(j − i)}`. spec: [t5.official]
#[derive(Debug, Clone, PartialEq)]
pub struct T5Official {
    /// The bucketing (validated at construction).
    pub bucketing: OfficialBucketing,
    /// `values[h][b]`, `num_buckets` learned scalars per head (T5's embedding table, transposed).
    pub values: Vec<Vec<f64>>,
}

impl T5Official {
    /// The causal-domain instance of the general form: boundaries from
    /// [`OfficialBucketing::boundaries`], value of segment `s` = `r_{h, bucket(s)}`.
    /// Equal to `self` for every `j ≤ i` (and everywhere when unidirectional).
    /// spec: [t5.official.boundaries]
    pub fn as_buckets(&self) -> Result<T5Buckets> {
        self.validate()?;
        let segments = self.bucketing.segments();
        Ok(T5Buckets {
            boundaries: self.bucketing.boundaries(),
            values: self
                .values
                .iter()
                .map(|row| segments.iter().map(|s| row[s.bucket as usize]).collect())
                .collect(),
        })
    }
}

impl AdditiveBias for T5Official {
    fn heads(&self) -> usize {
        self.values.len()
    }

    /// spec: [t5.official], [num.errors]
    fn validate(&self) -> Result<()> {
        validate_values(&self.values, self.bucketing.num_buckets() as usize)
    }

    /// spec: [t5.official], [t5.future]
    fn bias(&self, pair: Pair) -> DVector<f64> {
        let b = self.bucketing.bucket_of(pair.i, pair.j) as usize;
        DVector::from_iterator(self.values.len(), self.values.iter().map(|row| row[b]))
    }
}
