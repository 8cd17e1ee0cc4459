//! AdamW (Loshchilov and Hutter 2019) with its state exposed for checkpoints, the warmup +
//! cosine learning-rate schedule, and global-norm gradient clipping.
//!
//! candle-nn's `AdamW` keeps its moments private, so a resumed run could not continue
//! bit-for-bit; this one stores `m`, `v` and the step as named tensors.

use std::collections::{BTreeMap, HashMap};

use candle_core::{backprop::GradStore, Tensor, Var};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// AdamW hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AdamWConfig {
    /// β₁.
    pub beta1: f64,
    /// β₂.
    pub beta2: f64,
    /// ε.
    pub eps: f64,
    /// Decoupled weight decay (applied to matrices of the Transformer, see [`decays`]).
    pub weight_decay: f64,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        Self {
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.1,
        }
    }
}

/// Whether weight decay applies to a parameter: matrices of the Transformer only — not
/// biases, LayerNorm gains, or the positional encodings' own parameters (FIRE's c and
/// threshold, Kerple's r1/r2, T5's table), whose scale is their meaning.
pub fn decays(name: &str, rank: usize) -> bool {
    let encoding = name.contains("fire") || name.contains("kerple") || name.contains("rel_pos");
    rank >= 2 && !encoding
}

/// AdamW with named first and second moments.
#[derive(Debug, Clone)]
pub struct AdamW {
    /// Hyper-parameters.
    pub cfg: AdamWConfig,
    /// Steps taken.
    pub step: u64,
    m: BTreeMap<String, Tensor>,
    v: BTreeMap<String, Tensor>,
}

impl AdamW {
    /// Zero moments for every parameter.
    pub fn new(cfg: AdamWConfig, params: &BTreeMap<String, Var>) -> Result<Self> {
        let mut m = BTreeMap::new();
        let mut v = BTreeMap::new();
        for (name, p) in params {
            m.insert(name.clone(), p.as_tensor().zeros_like()?);
            v.insert(name.clone(), p.as_tensor().zeros_like()?);
        }
        Ok(Self { cfg, step: 0, m, v })
    }

    /// One update with learning rate `lr`; `grads` are by parameter name (a missing gradient
    /// counts as zero).
    pub fn update(
        &mut self,
        params: &BTreeMap<String, Var>,
        grads: &BTreeMap<String, Tensor>,
        lr: f64,
    ) -> Result<()> {
        self.step += 1;
        let t = self.step as i32;
        let (b1, b2) = (self.cfg.beta1, self.cfg.beta2);
        let c1 = 1.0 - b1.powi(t);
        let c2 = 1.0 - b2.powi(t);
        for (name, p) in params {
            let Some(g) = grads.get(name) else { continue };
            let (Some(m), Some(v)) = (self.m.get_mut(name), self.v.get_mut(name)) else {
                return Err(Error::Config(format!("optimizer has no state for {name}")));
            };
            *m = ((&*m * b1)? + (g * (1.0 - b1))?)?;
            *v = ((&*v * b2)? + (g.sqr()? * (1.0 - b2))?)?;
            let m_hat = (&*m / c1)?;
            let v_hat = (&*v / c2)?;
            let step = (m_hat / (v_hat.sqrt()? + self.cfg.eps)?)?;
            let theta = p.as_tensor();
            let decayed = if decays(name, theta.rank()) {
                (theta * (1.0 - lr * self.cfg.weight_decay))?
            } else {
                theta.clone()
            };
            p.set(&(decayed - (step * lr)?)?)?;
        }
        Ok(())
    }

    /// The moments as named tensors (`m.<param>`, `v.<param>`).
    pub fn state_tensors(&self) -> HashMap<String, Tensor> {
        let mut out = HashMap::new();
        for (k, t) in &self.m {
            out.insert(format!("m.{k}"), t.clone());
        }
        for (k, t) in &self.v {
            out.insert(format!("v.{k}"), t.clone());
        }
        out
    }

    /// Restores the moments saved by [`AdamW::state_tensors`] and the step count.
    pub fn load_state(&mut self, tensors: &HashMap<String, Tensor>, step: u64) -> Result<()> {
        for (prefix, map) in [("m", &mut self.m), ("v", &mut self.v)] {
            for (k, t) in map.iter_mut() {
                let saved =
                    tensors
                        .get(&format!("{prefix}.{k}"))
                        .ok_or_else(|| Error::Checkpoint {
                            path: format!("{prefix}.{k}"),
                            reason: "optimizer state missing".into(),
                        })?;
                *t = saved.to_device(t.device())?;
            }
        }
        self.step = step;
        Ok(())
    }
}

/// Linear warmup from 0 to `peak` over `warmup` steps, then cosine decay to `peak·min_ratio`
/// at `total`. `step` counts from 0.
pub fn learning_rate(step: u64, total: u64, warmup: u64, peak: f64, min_ratio: f64) -> f64 {
    if warmup > 0 && step < warmup {
        return peak * (step + 1) as f64 / warmup as f64;
    }
    let span = total.saturating_sub(warmup).max(1) as f64;
    let progress = ((step - warmup.min(step)) as f64 / span).min(1.0);
    let cosine = 0.5 * (1.0 + (std::f64::consts::PI * progress).cos());
    peak * (min_ratio + (1.0 - min_ratio) * cosine)
}

/// Collects the gradients of `params` by name and scales them so their global L2 norm is at
/// most `max_norm` (when positive). Returns the gradients and the norm before clipping.
/// The norm sums parameters in name order, so it is reproducible.
pub fn clipped_gradients(
    params: &BTreeMap<String, Var>,
    grads: &GradStore,
    max_norm: f64,
) -> Result<(BTreeMap<String, Tensor>, f64)> {
    let mut out = BTreeMap::new();
    let mut total = 0f64;
    for (name, p) in params {
        if let Some(g) = grads.get(p.as_tensor()) {
            let sq: f32 = g.sqr()?.sum_all()?.to_scalar()?;
            total += f64::from(sq);
            out.insert(name.clone(), g.clone());
        }
    }
    let norm = total.sqrt();
    if max_norm > 0.0 && norm > max_norm {
        let scale = max_norm / (norm + 1e-6);
        for g in out.values_mut() {
            *g = (&*g * scale)?;
        }
    }
    Ok((out, norm))
}
