//! Alibi (Press et al., 2022): a linear penalty on distance with a fixed slope per head.

use nalgebra::DVector;

use crate::baselines::{all_positive, per_head};
use crate::bias::{AdditiveBias, Pair};
use crate::error::{Error, Result};
use crate::positions::distance;

/// Alibi: `b_h(i, j) = −r_h·|i − j|`. spec: [alibi.bias]
#[derive(Debug, Clone, PartialEq)]
pub struct Alibi {
    /// `r_h > 0`, one slope per head.
    pub slopes: Vec<f64>,
}

impl Alibi {
    /// Alibi with the standard slopes for `heads` heads. spec: [alibi.slopes]
    pub fn standard(heads: usize) -> Result<Self> {
        Ok(Self {
            slopes: standard_slopes(heads)?,
        })
    }
}

/// `−r·|i − j|` for one head. spec: [alibi.bias]
pub fn alibi(r: f64, i: f64, j: f64) -> f64 {
    -r * (i - j).abs()
}

/// The exponents `e_h` of the standard slopes `2^{e_h}` for `H` heads: with `P` the largest
/// power of two `≤ H`, `−8h/P` for `h = 1..P`, then `−8(2m−1)/(2P)` for `m = 1..H−P`. Every
/// exponent is a dyadic rational, exact in f64. spec: [alibi.slopes]
pub fn standard_exponents(heads: usize) -> Result<Vec<f64>> {
    if heads == 0 {
        return Err(Error::Empty {
            what: "Alibi heads".into(),
        });
    }
    let p = 1usize << heads.ilog2();
    let pf = p as f64;
    let first = (1..=p).map(|h| -8.0 * h as f64 / pf);
    let rest = (1..=heads - p).map(|m| -8.0 * (2 * m - 1) as f64 / (2.0 * pf));
    Ok(first.chain(rest).collect())
}

/// The standard slopes `r_h = 2^{e_h}` ([`standard_exponents`]), each the correctly rounded
/// value of the exact power of two. spec: [alibi.slopes]
pub fn standard_slopes(heads: usize) -> Result<Vec<f64>> {
    Ok(standard_exponents(heads)?
        .into_iter()
        .map(f64::exp2)
        .collect())
}

impl AdditiveBias for Alibi {
    fn heads(&self) -> usize {
        self.slopes.len()
    }

    /// spec: [alibi.bias], [num.errors]
    fn validate(&self) -> Result<()> {
        per_head("Alibi slopes", self.slopes.len(), None)?;
        all_positive("Alibi slope", &self.slopes)
    }

    /// spec: [alibi.bias], [conv.future]
    fn bias(&self, pair: Pair) -> DVector<f64> {
        let n = distance(pair.i, pair.j).abs();
        DVector::from_iterator(
            self.slopes.len(),
            self.slopes.iter().map(|&r| alibi(r, n, 0.0)),
        )
    }
}
