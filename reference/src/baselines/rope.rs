//! RoPE (Su et al.) and RoPE with position interpolation (Chen et al., 2023) as score
//! functions: RoPE is not an additive bias, it rotates queries and keys so that their inner
//! product depends on positions only through `i − j`.

use nalgebra::DVector;

use crate::error::{checked, finite, Error, Result};

/// RoPE's default base. spec: [rope.frequencies]
pub const BASE: f64 = 10000.0;

/// Which coordinates form the planes the rotation acts on. spec: [rope.pairing]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pairing {
    /// Plane `m` is `(x_m, x_{m+d/2})`: GPT-NeoX and Hugging Face Llama (`rotate_half`).
    /// The normative pairing.
    #[default]
    HalfSplit,
    /// Plane `m` is `(x_{2m}, x_{2m+1})`: the RoFormer paper, GPT-J and Meta's Llama code.
    Interleaved,
}

/// A rotary encoding: base, position scale (1 for RoPE, `L_train / L_target` for RoPE-PI) and
/// pairing. spec: [rope.rotation], [rope.pi]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rope {
    /// The base `b > 1` of the frequencies.
    pub base: f64,
    /// `s > 0`: positions are multiplied by `s` before rotating.
    pub scale: f64,
    /// The pairing of coordinates.
    pub pairing: Pairing,
}

impl Default for Rope {
    fn default() -> Self {
        Self {
            base: BASE,
            scale: 1.0,
            pairing: Pairing::HalfSplit,
        }
    }
}

impl Rope {
    /// RoPE-PI for a model trained at `train_length` and run at `target_length ≥ train_length`:
    /// scale `s = train_length / target_length`. spec: [rope.pi]
    pub fn interpolated(train_length: f64, target_length: f64) -> Result<Self> {
        checked(
            "RoPE-PI train length",
            train_length,
            train_length > 0.0,
            "> 0",
        )?;
        checked(
            "RoPE-PI target length",
            target_length,
            target_length >= train_length,
            ">= the train length (interpolation only shrinks positions)",
        )?;
        Ok(Self {
            scale: train_length / target_length,
            ..Self::default()
        })
    }

    /// spec: [rope.frequencies], [rope.pi], [num.errors]
    pub fn validate(&self) -> Result<()> {
        checked("RoPE base", self.base, self.base > 1.0, "> 1")?;
        checked("RoPE scale", self.scale, self.scale > 0.0, "> 0")?;
        Ok(())
    }

    /// `ω_m = b^(−2m/d)` for `m = 0..d/2`. spec: [rope.frequencies]
    pub fn frequencies(&self, dim: usize) -> Result<Vec<f64>> {
        self.validate()?;
        if dim < 2 || !dim.is_multiple_of(2) {
            return Err(Error::Invalid {
                what: "RoPE dimension".into(),
                reason: format!("must be even and >= 2, got {dim}"),
            });
        }
        let d = dim as f64;
        Ok((0..dim / 2)
            .map(|m| self.base.powf(-((2 * m) as f64) / d))
            .collect())
    }

    /// The two coordinates of plane `m` in a vector of dimension `dim`. spec: [rope.pairing]
    pub fn plane(&self, m: usize, dim: usize) -> (usize, usize) {
        match self.pairing {
            Pairing::HalfSplit => (m, m + dim / 2),
            Pairing::Interleaved => (2 * m, 2 * m + 1),
        }
    }

    /// `R(p)·x`: plane `m` rotated by the angle `s·p·ω_m`, at a real position `p`.
    /// spec: [rope.rotation]
    pub fn rotate(&self, x: &DVector<f64>, position: f64) -> Result<DVector<f64>> {
        finite("RoPE position", position)?;
        for v in x.iter() {
            finite("RoPE vector entry", *v)?;
        }
        let dim = x.len();
        let freqs = self.frequencies(dim)?;
        let mut out = x.clone();
        for (m, w) in freqs.iter().enumerate() {
            let (a, b) = self.plane(m, dim);
            let (sin, cos) = (self.scale * position * w).sin_cos();
            out[a] = x[a] * cos - x[b] * sin;
            out[b] = x[a] * sin + x[b] * cos;
        }
        Ok(out)
    }

    /// The attention score `⟨R(i)·q, R(j)·k⟩` (before any 1/√d scaling) of query `q` at
    /// position `i` and key `k` at position `j`. spec: [rope.score]
    pub fn score(&self, q: &DVector<f64>, k: &DVector<f64>, i: f64, j: f64) -> Result<f64> {
        same_dim(q, k)?;
        Ok(self.rotate(q, i)?.dot(&self.rotate(k, j)?))
    }

    /// The same score through the relative form `⟨q, R(j − i)·k⟩`, equal in exact arithmetic.
    /// spec: [rope.score]
    pub fn relative_score(
        &self,
        q: &DVector<f64>,
        k: &DVector<f64>,
        i: f64,
        j: f64,
    ) -> Result<f64> {
        same_dim(q, k)?;
        finite("RoPE position", i)?;
        finite("RoPE position", j)?;
        Ok(q.dot(&self.rotate(k, j - i)?))
    }
}

fn same_dim(q: &DVector<f64>, k: &DVector<f64>) -> Result<()> {
    if q.len() != k.len() {
        return Err(Error::Shape {
            what: "RoPE query and key".into(),
            expected: q.len().to_string(),
            got: k.len().to_string(),
        });
    }
    Ok(())
}
