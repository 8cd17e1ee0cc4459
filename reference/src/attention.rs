//! Causal attention with an additive bias, literally: softmax(q·kᵀ/√d + b) · v.
//!
//! Some deviations only show in attention outputs (a bias added before the 1/√d scaling, a mask
//! folded into the bias), so the vectors carry this level too. spec: [attn.logits]

use nalgebra::DMatrix;

use crate::bias::Bias;
use crate::error::{Error, Result};
use crate::positions::{self, is_causal, Position};

/// Where the bias enters the logits: a plain word shared with the other implementations; the
/// maths of each placement is [`logits`]. spec: [attn.placement]
pub use fire_vocabulary::Placement;

/// One head's inputs: `q: [Q, d]`, `k: [K, d]`, `v: [K, d_v]`, rows in position-list order.
#[derive(Debug, Clone, PartialEq)]
pub struct HeadInputs {
    /// Queries, one row per query position.
    pub q: DMatrix<f64>,
    /// Keys, one row per key position.
    pub k: DMatrix<f64>,
    /// Values, one row per key position.
    pub v: DMatrix<f64>,
}

/// The logits of one head before masking. spec: [attn.logits], [attn.placement]
pub fn logits(inputs: &HeadInputs, bias: &DMatrix<f64>, placement: Placement) -> DMatrix<f64> {
    let scale = 1.0 / (inputs.q.ncols() as f64).sqrt();
    let raw = &inputs.q * inputs.k.transpose();
    match placement {
        Placement::AfterScaling => raw * scale + bias,
        Placement::BeforeScaling => (raw + bias) * scale,
    }
}

/// Which keys each query attends to: the causal ones, as [attn.causal] specifies, or every key
/// (the causal mask left out, a mistake the catalogue names). spec: [attn.causal]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Masking {
    /// Keys at or before the query.
    #[default]
    Causal,
    /// Every key.
    Unmasked,
}

/// softmax over the causally visible keys of each row, then the weighted sum of values.
/// Keys after the query get weight exactly 0, whatever their bias. spec: [attn.causal]
pub fn causal_head(
    inputs: &HeadInputs,
    bias: &DMatrix<f64>,
    queries: &[Position],
    keys: &[Position],
    placement: Placement,
) -> Result<DMatrix<f64>> {
    head(inputs, bias, queries, keys, placement, Masking::Causal)
}

/// [`causal_head`] under `masking`.
pub fn head(
    inputs: &HeadInputs,
    bias: &DMatrix<f64>,
    queries: &[Position],
    keys: &[Position],
    placement: Placement,
    masking: Masking,
) -> Result<DMatrix<f64>> {
    let s = logits(inputs, bias, placement);
    let mut out = DMatrix::zeros(queries.len(), inputs.v.ncols());
    for (q, &i) in queries.iter().enumerate() {
        let visible: Vec<usize> = (0..keys.len())
            .filter(|&k| masking == Masking::Unmasked || is_causal(i, keys[k]))
            .collect();
        if visible.is_empty() {
            return Err(Error::Invalid {
                what: "causal attention".into(),
                reason: format!("query position {i} sees no key (every key is after it)"),
            });
        }
        let max = visible
            .iter()
            .map(|&k| s[(q, k)])
            .fold(f64::NEG_INFINITY, f64::max);
        let weights: Vec<f64> = visible.iter().map(|&k| (s[(q, k)] - max).exp()).collect();
        let total: f64 = weights.iter().sum();
        for (&k, w) in visible.iter().zip(&weights) {
            let row = inputs.v.row(k) * (w / total);
            let mut target = out.row_mut(q);
            target += row;
        }
    }
    Ok(out)
}

/// Multi-head causal attention: one [`HeadInputs`] per head of `bias`. spec: [attn.causal]
pub fn causal(
    heads: &[HeadInputs],
    bias: &Bias,
    queries: &[Position],
    keys: &[Position],
    placement: Placement,
) -> Result<Vec<DMatrix<f64>>> {
    attend(heads, bias, queries, keys, placement, Masking::Causal)
}

/// [`causal`] under `masking`.
pub fn attend(
    heads: &[HeadInputs],
    bias: &Bias,
    queries: &[Position],
    keys: &[Position],
    placement: Placement,
    masking: Masking,
) -> Result<Vec<DMatrix<f64>>> {
    positions::validate("query positions", queries)?;
    positions::validate("key positions", keys)?;
    if heads.len() != bias.heads() {
        return Err(shape("heads", bias.heads(), heads.len()));
    }
    heads
        .iter()
        .enumerate()
        .map(|(h, x)| {
            check(x, queries.len(), keys.len())?;
            head(x, bias.head(h), queries, keys, placement, masking)
        })
        .collect()
}

fn check(x: &HeadInputs, nq: usize, nk: usize) -> Result<()> {
    if x.q.nrows() != nq {
        return Err(shape("q rows", nq, x.q.nrows()));
    }
    if x.k.nrows() != nk || x.v.nrows() != nk {
        return Err(shape("k/v rows", nk, x.k.nrows().max(x.v.nrows())));
    }
    if x.q.ncols() == 0 || x.q.ncols() != x.k.ncols() {
        return Err(shape("head dim of q and k", x.q.ncols(), x.k.ncols()));
    }
    if let Some(v) =
        x.q.iter()
            .chain(x.k.iter())
            .chain(x.v.iter())
            .find(|v| !v.is_finite())
    {
        return Err(Error::NonFinite {
            name: "attention input".into(),
            value: *v,
        });
    }
    Ok(())
}

fn shape(what: &str, expected: usize, got: usize) -> Error {
    Error::Shape {
        what: what.into(),
        expected: expected.to_string(),
        got: got.to_string(),
    }
}
