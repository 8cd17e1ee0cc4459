//! Kerple (Chi et al., 2022): conditionally positive definite kernels turned into biases, in the
//! logarithmic and the power variant, with two positive parameters per head.

use nalgebra::DVector;

use crate::baselines::{all_positive, per_head};
use crate::bias::{AdditiveBias, Pair};
use crate::error::{checked, Result};
use crate::positions::distance;

/// Kerple-log: `b_h(i, j) = −r1_h·ln(1 + r2_h·|i − j|)`. spec: [kerple.log]
#[derive(Debug, Clone, PartialEq)]
pub struct KerpleLog {
    /// `r1_h > 0`.
    pub r1: Vec<f64>,
    /// `r2_h > 0`.
    pub r2: Vec<f64>,
}

/// Kerple-power: `b_h(i, j) = −r1_h·|i − j|^{r2_h}`. spec: [kerple.power]
#[derive(Debug, Clone, PartialEq)]
pub struct KerplePower {
    /// `r1_h > 0`.
    pub r1: Vec<f64>,
    /// `0 < r2_h ≤ 2`.
    pub r2: Vec<f64>,
}

/// `−r1·ln(1 + r2·n)` at distance `n ≥ 0`. spec: [kerple.log]
pub fn kerple_log(r1: f64, r2: f64, n: f64) -> f64 {
    -r1 * (r2 * n).ln_1p()
}

/// `−r1·n^{r2}` at distance `n ≥ 0`. spec: [kerple.power]
pub fn kerple_power(r1: f64, r2: f64, n: f64) -> f64 {
    -r1 * n.powf(r2)
}

/// Both lists hold one finite, positive value per head. spec: [kerple.params]
fn validate_pairs(r1: &[f64], r2: &[f64]) -> Result<()> {
    per_head("Kerple r1", r1.len(), None)?;
    per_head("Kerple r2", r2.len(), Some(r1.len()))?;
    all_positive("Kerple r1", r1)?;
    all_positive("Kerple r2", r2)
}

impl AdditiveBias for KerpleLog {
    fn heads(&self) -> usize {
        self.r1.len()
    }

    /// spec: [kerple.params], [num.errors]
    fn validate(&self) -> Result<()> {
        validate_pairs(&self.r1, &self.r2)
    }

    /// spec: [kerple.log], [conv.future]
    fn bias(&self, pair: Pair) -> DVector<f64> {
        let n = distance(pair.i, pair.j).abs();
        DVector::from_iterator(
            self.r1.len(),
            self.r1
                .iter()
                .zip(&self.r2)
                .map(|(&a, &b)| kerple_log(a, b, n)),
        )
    }
}

impl AdditiveBias for KerplePower {
    fn heads(&self) -> usize {
        self.r1.len()
    }

    /// spec: [kerple.params], [num.errors]
    fn validate(&self) -> Result<()> {
        validate_pairs(&self.r1, &self.r2)?;
        for (h, &p) in self.r2.iter().enumerate() {
            checked(&format!("Kerple power r2[{h}]"), p, p <= 2.0, "0 < r2 <= 2")?;
        }
        Ok(())
    }

    /// spec: [kerple.power], [conv.future]
    fn bias(&self, pair: Pair) -> DVector<f64> {
        let n = distance(pair.i, pair.j).abs();
        DVector::from_iterator(
            self.r1.len(),
            self.r1
                .iter()
                .zip(&self.r2)
                .map(|(&a, &b)| kerple_power(a, b, n)),
        )
    }
}
