//! Sizes refused before anything is allocated: an allocation that fails aborts the process
//! (`memory allocation of N bytes failed`) with no word on which setting asked for it.

use std::path::Path;

use anyhow::{bail, Result};
use fire_accelerated::config::{EncodingConfig, ModelConfig};
use fire_accelerated::train::TrainConfig;

/// Bytes per key position of `bias` apart from the heads: the key list (u64) and the grid's
/// distance (f32).
pub(crate) const BIAS_BYTES_PER_KEY: u128 = 8 + 4;
/// Bytes per key position and head: the bias tensor and its copy (f32 each) and the plot's
/// point (two f64). A lower bound: the plot's text comes on top.
pub(crate) const BIAS_BYTES_PER_HEAD_KEY: u128 = 4 + 4 + 16;

/// `--query` before the model is even loaded: positions must be exactly representable (the
/// grid's own check would come only after a `0..=query` key list had been allocated).
pub(crate) fn check_bias_query(query: u64, run: &Path) -> Result<()> {
    let max = fire_vocabulary::MAX_POSITION;
    if query > max {
        bail!(
            "--query {query} is beyond 2^53 = {max}, the last exactly representable position \
             (the bias of {} would need every key 0..=query)",
            run.display()
        );
    }
    Ok(())
}

/// The machine's memory in bytes (`MemTotal` of /proc/meminfo); `None` where unreadable, and
/// then no size is refused up front.
fn mem_total() -> Option<u128> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u128 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// A size in bytes for a message: GB with the exact count.
fn bytes(n: u128) -> String {
    format!("{:.1} GB ({n} bytes)", n as f64 / 1e9)
}

/// Refuses `what` when it needs more than the machine's memory: an allocation that fails
/// aborts the process (`memory allocation of N bytes failed`) with no word on which setting.
pub(crate) fn check_memory(need: u128, what: &str) -> Result<()> {
    match mem_total() {
        Some(total) if need > total => bail!(
            "{what} would need at least {} of memory, more than this machine's {}",
            bytes(need),
            bytes(total)
        ),
        _ => Ok(()),
    }
}

/// A lower bound on the bytes a training run holds, from its sizes alone (u128: no size a
/// config can name overflows it): every parameter four times over in f32 (the weight, its
/// gradient and AdamW's two moments), the logits of a batch and their gradient, and per layer
/// the feed-forward's hidden activations and the residual stream kept for the backward pass.
/// Attention's scores and FIRE's grid come on top, so a refusal is never wrong, only late.
pub(crate) fn train_bytes(m: &ModelConfig, t: &TrainConfig) -> u128 {
    let n = |x: usize| x as u128;
    let (vocab, d, layers, ff) = (n(m.vocab_size), n(m.d_model), n(m.n_layers), n(m.d_ff));
    let fire = match &m.encoding {
        // f_θ: 1 → width, depth − 1 layers width → width, width → heads; one per layer, or
        // one shared (FIRE-S).
        EncodingConfig::Fire(f) | EncodingConfig::FireS(f) => {
            let (w, hidden) = (n(f.width), n(f.depth.saturating_sub(1)));
            let one = 2 * w + hidden * (w * w + w) + w * n(m.n_heads) + n(m.n_heads);
            if matches!(m.encoding, EncodingConfig::Fire(_)) {
                one * layers
            } else {
                one
            }
        }
        _ => 0,
    };
    let params = vocab * d + layers * (4 * d * d + 2 * d * ff) + fire;
    let tokens = n(t.batch) * n(t.seq_len);
    4 * 4 * params + 2 * 4 * tokens * vocab + 4 * tokens * layers * (d + ff)
}
