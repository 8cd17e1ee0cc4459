//! Sampling with a key/value cache: the prompt is processed once, then each new token attends
//! to the cache. FIRE's normaliser uses each new query's own position (the query row of the
//! grid is the new token's position), so cached decoding equals full recomputation.

use candle_core::{DType, Tensor};

use fire_vocabulary::SplitMix64;

use crate::attention::{AttentionPath, Purpose};
use crate::error::{ensure, Result};
use crate::model::Model;

/// Sampling settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SampleConfig {
    /// Tokens to generate.
    pub max_new: usize,
    /// Softmax temperature; 0 means greedy.
    pub temperature: f64,
    /// Keep only the `top_k` most likely tokens (0 = all).
    pub top_k: usize,
    /// Sampling seed.
    pub seed: u64,
    /// Query-chunk size for the prompt.
    pub chunk: usize,
}

/// Draws a token from `logits` (`[V]`).
pub fn sample(logits: &[f32], cfg: &SampleConfig, rng: &mut SplitMix64) -> u32 {
    let mut idx: Vec<usize> = (0..logits.len()).collect();
    idx.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    if cfg.temperature <= 0.0 || idx.len() == 1 {
        return idx.first().copied().unwrap_or(0) as u32;
    }
    if cfg.top_k > 0 {
        idx.truncate(cfg.top_k);
    }
    let max = f64::from(logits[idx[0]]);
    let weights: Vec<f64> = idx
        .iter()
        .map(|&i| ((f64::from(logits[i]) - max) / cfg.temperature).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    let mut u = rng.unit() * total;
    for (w, &i) in weights.iter().zip(&idx) {
        if u < *w {
            return i as u32;
        }
        u -= w;
    }
    idx[idx.len() - 1] as u32
}

/// Continues `prompt` by `cfg.max_new` tokens on the materialised candle path.
pub fn generate(model: &Model, prompt: &[u32], cfg: &SampleConfig) -> Result<Vec<u32>> {
    generate_with(model, prompt, cfg, AttentionPath::Materialised)
}

/// Continues `prompt` by `cfg.max_new` tokens; with [`AttentionPath::Fused`] (additive
/// encodings where a fused backend runs) the prompt goes through the fused kernel in one call
/// and every new token is one fused decoding step against the cache, with the encoding
/// compiled once.
pub fn generate_with(
    model: &Model,
    prompt: &[u32],
    cfg: &SampleConfig,
    attention: AttentionPath,
) -> Result<Vec<u32>> {
    ensure(!prompt.is_empty(), || "the prompt is empty".into())?;
    let vocab = model.cfg.vocab_size as u32;
    ensure(prompt.iter().all(|&t| t < vocab), || {
        "prompt token outside the vocabulary".into()
    })?;
    // NaN compares false everywhere and would sample garbage; a negative temperature would
    // silently mean greedy.
    ensure(
        cfg.temperature.is_finite() && cfg.temperature >= 0.0,
        || {
            format!(
                "the temperature must be 0 (greedy) or a positive finite number, got {}",
                cfg.temperature
            )
        },
    )?;
    // The last position must be exactly representable (and the sum must not overflow).
    let capacity = prompt
        .len()
        .checked_add(cfg.max_new)
        .filter(|&c| c as u128 <= u128::from(fire_vocabulary::MAX_POSITION))
        .ok_or_else(|| {
            crate::Error::Config(format!(
                "{} prompt tokens plus {} new ones exceed 2^53 positions",
                prompt.len(),
                cfg.max_new
            ))
        })?;
    let mut rng = SplitMix64::new(cfg.seed);
    let mut cache = model.new_cache();
    let x = Tensor::from_slice(prompt, (1, prompt.len()), model.device())?;
    let purpose = Purpose::Infer {
        capacity,
        chunk: cfg.chunk,
    };
    let backend = model.backend(attention, purpose)?;
    let mut logits = model.forward(&x, &backend, Some(&mut cache))?;
    let mut out = Vec::with_capacity(cfg.max_new);
    for _ in 0..cfg.max_new {
        let last = logits
            .narrow(1, logits.dim(1)? - 1, 1)?
            .squeeze(1)?
            .squeeze(0)?;
        let v: Vec<f32> = last.to_dtype(DType::F32)?.to_vec1()?;
        let t = sample(&v, cfg, &mut rng);
        out.push(t);
        let x = Tensor::from_slice(&[t], (1, 1), model.device())?;
        logits = model.forward(&x, &backend, Some(&mut cache))?;
    }
    Ok(out)
}
