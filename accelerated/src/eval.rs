//! Perplexity at a list of lengths on held-out documents (the paper's Figure 1 measurement).
//!
//! Every length scores the same tokens: spans of the longest length are taken from held-out
//! documents at least that long, and each length cuts every span into windows of its size. Long sequences go through the model in query
//! chunks with a key/value cache, so no `[H, N, N]` tensor is ever built.

use candle_core::Tensor;
use serde::{Deserialize, Serialize};

use crate::attention::{AttentionPath, Purpose};
use crate::data::{eval_spans, eval_windows, Document};
use crate::error::{ensure, Result};
use crate::model::Model;
use crate::nn::{nll_rows, nll_sum};

/// Evaluation settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalConfig {
    /// Sequence lengths to evaluate.
    pub lengths: Vec<usize>,
    /// Spans of the longest length (each shorter length cuts the same spans into windows).
    pub max_windows: usize,
    /// Query-chunk size (memory is `[B, H, chunk, N]` per layer).
    pub chunk: usize,
    /// Windows per forward pass.
    pub batch: usize,
    /// The attention implementation (fused by default where the encoding is additive and the
    /// device can run it; otherwise the chunked candle backend).
    #[serde(default)]
    pub attention: AttentionPath,
    /// The same-text view: at lengths above this position, also report the loss of the
    /// positions before it and from it on, separately (the same windows, so text difficulty
    /// cannot masquerade as extrapolation). Usually the training length.
    #[serde(default)]
    pub split_at: Option<usize>,
}

/// The result at one length.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LengthResult {
    /// Sequence length.
    pub length: usize,
    /// Windows evaluated.
    pub windows: usize,
    /// Predicted tokens.
    pub tokens: usize,
    /// Mean negative log-likelihood per token (nats): the log-perplexity.
    pub log_ppl: f64,
    /// exp(log_ppl).
    pub ppl: f64,
    /// With [`EvalConfig::split_at`] `= P < length`: the log-perplexity of the positions
    /// `0..P` of these windows (contexts no longer than P).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_ppl_before: Option<f64>,
    /// … and of the positions `P..length` (contexts longer than P).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_ppl_after: Option<f64>,
}

/// One checkpoint's evaluation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// A label (the run directory's name by default).
    pub label: String,
    /// The encoding.
    pub encoding: String,
    /// Training length.
    pub train_len: usize,
    /// Optimizer steps of the checkpoint.
    pub step: u64,
    /// One entry per length.
    pub results: Vec<LengthResult>,
}

/// Evaluates `model` on `docs` at every length of `cfg`.
pub fn evaluate(model: &Model, docs: &[Document], cfg: &EvalConfig) -> Result<Vec<LengthResult>> {
    ensure(!cfg.lengths.is_empty(), || "no evaluation lengths".into())?;
    ensure(cfg.lengths.iter().all(|&l| l > 0), || {
        format!(
            "evaluation lengths (--lengths) must be positive, got {:?}",
            cfg.lengths
        )
    })?;
    let longest = cfg.lengths.iter().copied().max().unwrap_or(1);
    let spans = eval_spans(docs, longest, cfg.max_windows)?;
    // Chosen once; a fused backend compiles the encoding once from the current weights.
    let purpose = Purpose::Infer {
        capacity: longest,
        chunk: cfg.chunk,
    };
    let backend = model.backend(cfg.attention, purpose)?;
    let mut out = Vec::with_capacity(cfg.lengths.len());
    for &len in &cfg.lengths {
        let windows = eval_windows(&spans, len);
        let split = cfg.split_at.filter(|&p| p > 0 && p < len);
        let mut total = 0f64;
        let mut before = 0f64;
        let mut tokens = 0usize;
        for group in windows.chunks(cfg.batch.max(1)) {
            let b = group.len();
            let mut x = Vec::with_capacity(b * len);
            let mut y = Vec::with_capacity(b * len);
            for w in group {
                x.extend_from_slice(&w[..len]);
                y.extend_from_slice(&w[1..]);
            }
            let x = Tensor::from_vec(x, (b, len), model.device())?;
            let y = Tensor::from_vec(y, b * len, model.device())?;
            let logits = model.forward(&x, &backend, None)?;
            let logits = logits.reshape((b * len, ()))?;
            match split {
                None => total += nll_sum(&logits, &y)?,
                Some(p) => {
                    let nll = nll_rows(&logits, &y)?;
                    for row in nll.chunks(len) {
                        before += row[..p].iter().sum::<f64>();
                        total += row.iter().sum::<f64>();
                    }
                }
            }
            tokens += b * len;
        }
        let log_ppl = total / tokens as f64;
        let rows = windows.len() as f64;
        out.push(LengthResult {
            length: len,
            windows: windows.len(),
            tokens,
            log_ppl,
            ppl: log_ppl.exp(),
            log_ppl_before: split.map(|p| before / (rows * p as f64)),
            log_ppl_after: split.map(|p| (total - before) / (rows * (len - p) as f64)),
        });
    }
    Ok(out)
}

/// A plain-text table of several reports: one row per length, one column per report.
pub fn table(reports: &[Report]) -> String {
    let mut lengths: Vec<usize> = reports
        .iter()
        .flat_map(|r| r.results.iter().map(|x| x.length))
        .collect();
    lengths.sort_unstable();
    lengths.dedup();
    let mut s = format!("{:>8}", "length");
    for r in reports {
        s.push_str(&format!(" {:>14}", truncate(&r.label, 14)));
    }
    s.push_str("   (log-perplexity, nats/token)\n");
    for len in lengths {
        s.push_str(&format!("{len:>8}"));
        for r in reports {
            match r.results.iter().find(|x| x.length == len) {
                Some(x) => s.push_str(&format!(" {:>14.4}", x.log_ppl)),
                None => s.push_str(&format!(" {:>14}", "-")),
            }
        }
        s.push('\n');
    }
    let split: Vec<(&Report, &LengthResult)> = reports
        .iter()
        .flat_map(|r| r.results.iter().map(move |x| (r, x)))
        .filter(|(_, x)| x.log_ppl_before.is_some())
        .collect();
    if !split.is_empty() {
        s.push_str("same text (positions before / from the split):\n");
        for (r, x) in split {
            s.push_str(&format!(
                "  {:>14} {:>6}: {:.4} / {:.4}\n",
                truncate(&r.label, 14),
                x.length,
                x.log_ppl_before.unwrap_or(f64::NAN),
                x.log_ppl_after.unwrap_or(f64::NAN)
            ));
        }
    }
    s
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}
