//! T5's relative position bias in the two forms of the paper: the simplified form with a cap K
//! and the general bucketed form of Appendix A. The official log-binned bucketing is in
//! [`crate::baselines::t5_official`] and reduces to the general form on the causal domain.

use nalgebra::{DMatrix, DVector};

use crate::baselines::per_head;
use crate::bias::{AdditiveBias, Pair};
use crate::error::{finite, Error, Result};
use crate::positions::Position;

/// The distance T5 buckets: `n = i − j` on the causal domain, `0` for keys after the query
/// (mesh-tensorflow's unidirectional `n = max(n, 0)`). spec: [t5.future]
pub fn causal_distance(i: Position, j: Position) -> u64 {
    i.saturating_sub(j)
}

/// The bucket of distance `n` under boundaries `0 = l_0 < l_1 < … < l_K`: the largest `k` with
/// `l_k ≤ n`. spec: [t5.buckets]
pub fn bucket(boundaries: &[u64], n: u64) -> usize {
    boundaries.partition_point(|&l| l <= n).saturating_sub(1)
}

/// Checks `0 = l_0 < l_1 < … < l_K`. spec: [t5.buckets]
pub fn validate_boundaries(boundaries: &[u64]) -> Result<()> {
    match boundaries.first() {
        None => Err(Error::Empty {
            what: "T5 bucket boundaries".into(),
        }),
        Some(&l0) if l0 != 0 => Err(Error::Invalid {
            what: "T5 bucket boundaries".into(),
            reason: format!("the first boundary l_0 must be 0, got {l0}"),
        }),
        Some(_) => match boundaries.windows(2).position(|w| w[0] >= w[1]) {
            Some(k) => Err(Error::Invalid {
                what: "T5 bucket boundaries".into(),
                reason: format!(
                    "boundaries must increase strictly, but l_{k} = {} and l_{} = {}",
                    boundaries[k],
                    k + 1,
                    boundaries[k + 1]
                ),
            }),
            None => Ok(()),
        },
    }
}

/// Checks a `[H][buckets]` table of learned values: at least one head, `buckets` finite values
/// per head. spec: [t5.buckets], [baselines.heads]
pub fn validate_values(values: &[Vec<f64>], buckets: usize) -> Result<()> {
    per_head("T5 values (heads)", values.len(), None)?;
    for (h, row) in values.iter().enumerate() {
        if row.len() != buckets {
            return Err(Error::Shape {
                what: format!("T5 values of head {h}"),
                expected: format!("{buckets} (one per bucket)"),
                got: row.len().to_string(),
            });
        }
        for v in row {
            finite(&format!("T5 value of head {h}"), *v)?;
        }
    }
    Ok(())
}

/// `[r_{h,k}]_h` for bucket `k`: the per-head bias of one bucket.
fn column(values: &[Vec<f64>], k: usize) -> DVector<f64> {
    DVector::from_iterator(values.len(), values.iter().map(|row| row[k]))
}

/// T5 RPE, general bucketed form (Appendix A): `b_h(i, j) = r_{h, k(i−j)}` with
/// `k(n) = max{k : l_k ≤ n}`. spec: [t5.buckets]
#[derive(Debug, Clone, PartialEq)]
pub struct T5Buckets {
    /// `0 = l_0 < l_1 < … < l_K`, shared by all heads.
    pub boundaries: Vec<u64>,
    /// `values[h][k] = r_{h,k}`, `K + 1` learned scalars per head.
    pub values: Vec<Vec<f64>>,
}

impl T5Buckets {
    /// The number of buckets `K + 1`.
    pub fn buckets(&self) -> usize {
        self.boundaries.len()
    }

    /// The values as a `[H, K+1]` matrix.
    pub fn table(&self) -> DMatrix<f64> {
        DMatrix::from_fn(self.values.len(), self.buckets(), |h, k| self.values[h][k])
    }
}

impl AdditiveBias for T5Buckets {
    fn heads(&self) -> usize {
        self.values.len()
    }

    /// spec: [t5.buckets], [num.errors]
    fn validate(&self) -> Result<()> {
        validate_boundaries(&self.boundaries)?;
        validate_values(&self.values, self.buckets())
    }

    /// spec: [t5.buckets], [t5.future]
    fn bias(&self, pair: Pair) -> DVector<f64> {
        column(
            &self.values,
            bucket(&self.boundaries, causal_distance(pair.i, pair.j)),
        )
    }
}

/// T5 RPE, simplified form: `b_h(i, j) = r_{h, min(i−j, K)}`. spec: [t5.simplified]
#[derive(Debug, Clone, PartialEq)]
pub struct T5Simplified {
    /// The cap `K ≥ 0`: distances `≥ K` share the last value.
    pub cap: u64,
    /// `values[h][k] = r_{h,k}` for `k = 0..=K`.
    pub values: Vec<Vec<f64>>,
}

impl T5Simplified {
    /// The simplified form as the general form with `l_k = k`, `k = 0..=K`. spec: [t5.simplified]
    pub fn as_buckets(&self) -> T5Buckets {
        T5Buckets {
            boundaries: (0..=self.cap).collect(),
            values: self.values.clone(),
        }
    }
}

impl AdditiveBias for T5Simplified {
    fn heads(&self) -> usize {
        self.values.len()
    }

    /// spec: [t5.simplified], [num.errors]
    fn validate(&self) -> Result<()> {
        let buckets = usize::try_from(self.cap)
            .ok()
            .and_then(|k| k.checked_add(1))
            .ok_or_else(|| Error::Invalid {
                what: "T5 cap K".into(),
                reason: format!("K = {} does not fit in memory", self.cap),
            })?;
        validate_values(&self.values, buckets)
    }

    /// spec: [t5.simplified], [t5.future]
    fn bias(&self, pair: Pair) -> DVector<f64> {
        let k = causal_distance(pair.i, pair.j).min(self.cap);
        // validate() guarantees K + 1 fits in usize, so k ≤ K does.
        column(&self.values, usize::try_from(k).unwrap_or(usize::MAX))
    }
}
