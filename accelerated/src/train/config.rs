//! A training run's settings: what a run directory's `config.json` and every checkpoint record
//! besides the model's shape.

use std::path::PathBuf;

use fire_vocabulary::SplitMix64;
use serde::{Deserialize, Serialize};

use crate::attention::AttentionPath;
use crate::optim::AdamWConfig;

/// A training run's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainConfig {
    /// Training length (tokens per sequence).
    pub seq_len: usize,
    /// Sequences per step.
    pub batch: usize,
    /// Optimizer steps.
    pub steps: u64,
    /// Linear warmup steps.
    pub warmup: u64,
    /// Peak learning rate.
    pub lr: f64,
    /// Final learning rate as a fraction of the peak.
    pub min_lr_ratio: f64,
    /// Global gradient-norm clip (0 disables).
    pub clip: f64,
    /// AdamW.
    pub adamw: AdamWConfig,
    /// Seed of the initial weights and of the data order.
    pub seed: u64,
    /// Fraction of documents held out.
    pub held_out: f64,
    /// Corpus directory (`None`: the embedded corpus).
    pub corpus: Option<PathBuf>,
    /// A Hugging Face `tokenizer.json` (`None`: bytes). The model's `vocab_size` must cover
    /// its ids.
    pub tokenizer: Option<PathBuf>,
    /// Steps between checkpoints (the last step is always saved).
    pub checkpoint_every: u64,
    /// Steps between metrics lines (the last step is always logged).
    pub log_every: u64,
    /// The attention implementation of training: `fused` runs the fused op with a backward
    /// pass ([`crate::attention::fused_train`], no `[B, H, N, N]` tensor: long sequences fit)
    /// where the encoding is additive and the device is the CPU, the candle backend otherwise;
    /// `materialised` always takes the candle backend.
    pub attention: AttentionPath,
    /// Randomised position offsets (Ruoss et al. 2023, "Randomized Positional Encodings Boost
    /// Length Generalization of Transformers"): when positive, each step places its sequences
    /// at positions `k..k + seq_len` with `k` uniform in `0..=position_offset`, so a FIRE model
    /// meets during training the query positions (normalisers) of longer contexts. Distance-only
    /// encodings are unaffected. `k` is a pure function of the seed and the step, so resume
    /// stays exact and the batches are those of the same run without offsets. 0 (the default,
    /// and what a config written before the field means) trains at `0..seq_len`.
    pub position_offset: u64,
}

impl TrainConfig {
    /// The first position of `step`'s sequences (see [`Self::position_offset`]).
    pub fn position_offset_at(&self, step: u64) -> u64 {
        if self.position_offset == 0 {
            return 0;
        }
        // Its own stream, apart from the data order's, so offsets never change the batches.
        let mut rng =
            SplitMix64::new(self.seed ^ 0x0FF5_E7F0_5EED ^ step.wrapping_mul(0x9E37_79B9));
        // Saturating: `problems` refuses offsets near u64::MAX, but a config built in code
        // that skipped it must not panic here.
        rng.below(self.position_offset.saturating_add(1))
    }
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            seq_len: 128,
            batch: 16,
            steps: 1000,
            warmup: 50,
            lr: 3e-3,
            min_lr_ratio: 0.1,
            clip: 1.0,
            adamw: AdamWConfig::default(),
            seed: 0,
            held_out: 0.15,
            corpus: None,
            tokenizer: None,
            checkpoint_every: 250,
            log_every: 10,
            attention: AttentionPath::default(),
            position_offset: 0,
        }
    }
}

impl TrainConfig {
    /// Every setting out of range, as `(field, what is wrong)`; empty when the config is
    /// usable. The field names are this struct's (a YAML/JSON training config's keys); the
    /// command line maps them to its flags.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        let mut positive = |field: &'static str, v: u64| {
            if v == 0 {
                out.push((field, "must be at least 1, got 0".to_owned()));
            }
        };
        positive("seq_len", self.seq_len as u64);
        positive("batch", self.batch as u64);
        positive("steps", self.steps);
        positive("checkpoint_every", self.checkpoint_every);
        positive("log_every", self.log_every);
        if !(self.lr.is_finite() && self.lr > 0.0) {
            out.push(("lr", format!("must be a positive number, got {}", self.lr)));
        } else if self.lr < f64::from(f32::MIN_POSITIVE) {
            // The optimizer computes in f32: a rate below f32's smallest normal number is 0
            // or a denormal there, and the run would silently not train. (One above f32::MAX
            // is infinite there and stops as diverged at step 1, with its own message.)
            out.push((
                "lr",
                format!(
                    "must be at least {:e} (the smallest normal f32: the optimizer computes in \
                     f32), got {:e}",
                    f32::MIN_POSITIVE,
                    self.lr
                ),
            ));
        }
        // Every position a step uses, `offset + seq_len - 1`, must be exactly representable;
        // computed in u128 so that an absurd offset is named rather than overflowing.
        let last = u128::from(self.position_offset) + self.seq_len as u128;
        if last > u128::from(fire_vocabulary::MAX_POSITION) {
            out.push((
                "position_offset",
                format!(
                    "plus seq_len ({}) must be at most 2^53 = {} (positions beyond are not \
                     exactly representable), got {}",
                    self.seq_len,
                    fire_vocabulary::MAX_POSITION,
                    self.position_offset
                ),
            ));
        }
        if !(0.0..=1.0).contains(&self.min_lr_ratio) {
            out.push((
                "min_lr_ratio",
                format!("must be between 0 and 1, got {}", self.min_lr_ratio),
            ));
        }
        if !(self.clip.is_finite() && self.clip >= 0.0) {
            out.push((
                "clip",
                format!("must be 0 (off) or a positive number, got {}", self.clip),
            ));
        }
        if !(0.0..=1.0).contains(&self.held_out) {
            out.push((
                "held_out",
                format!("must be between 0 and 1, got {}", self.held_out),
            ));
        }
        let a = &self.adamw;
        for (field, v) in [("adamw.beta1", a.beta1), ("adamw.beta2", a.beta2)] {
            if !(0.0..1.0).contains(&v) {
                out.push((field, format!("must be in [0, 1), got {v}")));
            }
        }
        if !(a.eps.is_finite() && a.eps > 0.0) {
            out.push(("adamw.eps", format!("must be positive, got {}", a.eps)));
        }
        if !(a.weight_decay.is_finite() && a.weight_decay >= 0.0) {
            out.push((
                "adamw.weight_decay",
                format!("must be 0 or positive, got {}", a.weight_decay),
            ));
        }
        out
    }

    /// Fails naming the first setting out of range ([`Self::problems`]).
    pub fn validate(&self) -> crate::error::Result<()> {
        match self.problems().into_iter().next() {
            None => Ok(()),
            Some((field, what)) => Err(crate::error::Error::Config(format!(
                "training setting `{field}` {what}"
            ))),
        }
    }
}
