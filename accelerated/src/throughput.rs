//! End-to-end evaluation throughput (tokens/s) at multiples of a training length: fused FIRE,
//! fused NoPE and the materialised candle path with FIRE, measured side by side in one run on
//! the same random tokens, reported as ratios. A measurement, not a test: `fire-lm bench`.

use std::time::Instant;

use candle_core::{Device, Tensor};
use fire_vocabulary::SplitMix64;

use crate::attention::{AttentionPath, Backend, Purpose};
use crate::config::{EncodingConfig, FireConfig, ModelConfig};
use crate::error::{Error, Result};
use crate::model::Model;
use crate::params::ParamStore;

/// What to measure.
#[derive(Debug, Clone)]
pub struct Config {
    /// The (notional) training length: FIRE's `L_init` and the candle path's query chunk.
    pub train_len: usize,
    /// Evaluated lengths as multiples of `train_len`.
    pub multiples: Vec<usize>,
    /// Model width, heads, layers.
    pub d_model: usize,
    /// `H`.
    pub heads: usize,
    /// Blocks.
    pub layers: usize,
    /// Repeats (the fastest is reported).
    pub repeats: usize,
    /// The candle path is skipped above this length (its chunked bias is `[H, chunk, N]`).
    pub candle_max_len: usize,
    /// Measure only fused FIRE (long-context memory runs).
    pub fire_only: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            train_len: 128,
            multiples: vec![1, 2, 4, 8, 16],
            d_model: 128,
            heads: 4,
            layers: 2,
            repeats: 2,
            candle_max_len: 1 << 20,
            fire_only: false,
        }
    }
}

/// Tokens/s at one length (`None`: not measured).
#[derive(Debug, Clone, Copy)]
pub struct Row {
    /// Length.
    pub n: usize,
    /// Fused FIRE (compile + forward).
    pub fire_fused: f64,
    /// Fused NoPE.
    pub nope_fused: Option<f64>,
    /// The candle path with FIRE (chunked, bias materialised per chunk).
    pub fire_candle: Option<f64>,
}

fn model(cfg: &Config, encoding: EncodingConfig) -> Result<Model> {
    let m = ModelConfig {
        d_model: cfg.d_model,
        n_heads: cfg.heads,
        n_layers: cfg.layers,
        d_ff: 4 * cfg.d_model,
        ..ModelConfig::tiny(encoding)
    };
    let mut store = ParamStore::fresh(&Device::Cpu, 0);
    Model::new(&m, &mut store)
}

fn best(repeats: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    let mut best = f64::INFINITY;
    for _ in 0..repeats.max(1) {
        let t = Instant::now();
        f()?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(best)
}

/// Runs the measurement; `progress` gets one line per length.
pub fn end_to_end(cfg: &Config, mut progress: impl FnMut(&str)) -> Result<Vec<Row>> {
    let fire_cfg = FireConfig {
        l_init: cfg.train_len as f64,
        ..FireConfig::default()
    };
    let fire = model(cfg, EncodingConfig::Fire(fire_cfg))?;
    let nope = model(cfg, EncodingConfig::Nope)?;
    let mut rows = Vec::new();
    for &k in &cfg.multiples {
        let n = k * cfg.train_len;
        let mut rng = SplitMix64::new(n as u64);
        let t: Vec<u32> = (0..n).map(|_| rng.below(256) as u32).collect();
        let x = Tensor::from_vec(t, (1, n), &Device::Cpu)?;
        // Compile + forward, as an evaluation does.
        let fused_run = |m: &Model| -> Result<()> {
            let purpose = Purpose::Infer {
                capacity: n,
                chunk: n,
            };
            let backend = m.backend(AttentionPath::Fused, purpose)?;
            if !matches!(backend, Backend::FusedEval(_)) {
                return Err(Error::Config("no fused form".into()));
            }
            m.forward(&x, &backend, None).map(|_| ())
        };
        let tps = |s: f64| n as f64 / s;
        let fire_fused = tps(best(cfg.repeats, || fused_run(&fire))?);
        let nope_fused = if cfg.fire_only {
            None
        } else {
            Some(tps(best(cfg.repeats, || fused_run(&nope))?))
        };
        let fire_candle = if cfg.fire_only || n > cfg.candle_max_len {
            None
        } else {
            let candle = Backend::Candle {
                chunk: cfg.train_len,
            };
            Some(tps(best(cfg.repeats, || {
                let mut cache = fire.new_cache();
                fire.forward(&x, &candle, Some(&mut cache)).map(|_| ())
            })?))
        };
        let row = Row {
            n,
            fire_fused,
            nope_fused,
            fire_candle,
        };
        progress(&format!("{row:?}"));
        rows.push(row);
    }
    Ok(rows)
}

/// The rows as a table of tokens/s and ratios.
pub fn table(cfg: &Config, rows: &[Row]) -> String {
    let opt = |v: Option<f64>, p: usize| v.map_or_else(|| "-".into(), |v| format!("{v:.p$}"));
    let mut s = format!(
        "end-to-end eval tokens/s (d_model {}, {} heads, {} layers, train length {}; best of {})\n",
        cfg.d_model, cfg.heads, cfg.layers, cfg.train_len, cfg.repeats
    );
    s.push_str(&format!(
        "{:>7} {:>6} {:>12} {:>12} {:>12} {:>14} {:>16}\n",
        "N", "xL", "fused FIRE", "fused NoPE", "candle FIRE", "NoPE/FIRE", "fused/candle"
    ));
    for r in rows {
        s.push_str(&format!(
            "{:>7} {:>6} {:>12.0} {:>12} {:>12} {:>14} {:>16}\n",
            r.n,
            r.n / cfg.train_len.max(1),
            r.fire_fused,
            opt(r.nope_fused, 0),
            opt(r.fire_candle, 0),
            opt(r.nope_fused.map(|x| x / r.fire_fused), 3),
            opt(r.fire_candle.map(|x| r.fire_fused / x), 2),
        ));
    }
    s.push_str("NoPE/FIRE: fused FIRE's time over fused NoPE's (1.00 = FIRE free); fused/candle: speed-up over the candle path\n");
    s
}
