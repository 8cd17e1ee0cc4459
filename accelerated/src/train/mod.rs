//! Training: AdamW, warmup + cosine decay, global-norm clipping, seeded batches, JSON-lines
//! metrics, atomic checkpoints ([`checkpoint`]) and exact resume.
//!
//! Everything a step depends on — parameters, AdamW moments and step, the data RNG — is in the
//! checkpoint, so a resumed run repeats the uninterrupted run's losses bit for bit (on the same
//! device and thread count).

pub mod checkpoint;
mod config;
mod record;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::{Device, Tensor};
use fire_vocabulary::SplitMix64;
use serde::{Deserialize, Serialize};

pub use config::TrainConfig;
pub use record::BatchRecorder;

use crate::attention::Purpose;
use crate::config::ModelConfig;
use crate::data::{Batcher, Corpus};
use crate::error::{io, Error, Result};
use crate::model::Model;
use crate::nn::cross_entropy;
use crate::optim::{clipped_gradients, learning_rate, AdamW};
use crate::params::ParamStore;
use crate::tokenizer::Tokenizer;
use checkpoint::State;

/// How to run.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The run directory (config, metrics, checkpoints).
    pub run: PathBuf,
    /// Continue from the run's latest checkpoint.
    pub resume: bool,
    /// Stop after this many steps in total (as if killed), for testing resume.
    pub stop_after: Option<u64>,
    /// Record the run for replay by an independent implementation (a PyTorch twin): the
    /// initial state dict as `DIR/init.safetensors` and every step's batch in
    /// `DIR/batches.u32`. Recorded rather than re-derived so the twin need not re-implement the
    /// corpus walk, the split and the sampler, and stays valid when the sampler changes.
    /// See [`BatchRecorder`] for the format.
    pub record: Option<PathBuf>,
    /// Show a progress bar.
    pub progress: bool,
}

/// One metrics line.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Steps completed.
    pub step: u64,
    /// Training loss of this step's batch (nats/token) before the update.
    pub loss: f32,
    /// Learning rate used.
    pub lr: f64,
    /// Gradient norm before clipping.
    pub grad_norm: f64,
    /// Seconds since this process started training.
    pub elapsed_s: f64,
    /// Tokens per second in this process so far.
    pub tokens_per_s: f64,
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Every step's loss in this process, `(step, loss)`.
    pub losses: Vec<(u64, f32)>,
    /// The final checkpoint.
    pub checkpoint: PathBuf,
    /// Throughput of this process.
    pub tokens_per_s: f64,
}

fn read_config(run: &Path) -> Result<(ModelConfig, TrainConfig)> {
    #[derive(Deserialize)]
    struct Both {
        model: ModelConfig,
        train: TrainConfig,
    }
    let p = run.join("config.json");
    let text = std::fs::read_to_string(&p).map_err(io(&p))?;
    let both: Both = serde_json::from_str(&text).map_err(|e| Error::Parse {
        path: p.display().to_string(),
        reason: e.to_string(),
    })?;
    Ok((both.model, both.train))
}

/// Trains `model_cfg` with `cfg` into `opts.run` (or resumes the run found there, whose saved
/// configuration then wins).
pub fn train(
    model_cfg: &ModelConfig,
    cfg: &TrainConfig,
    opts: &Options,
    device: &Device,
) -> Result<Outcome> {
    let run = &opts.run;
    let resumed = if opts.resume {
        Some(checkpoint::load(run, device)?)
    } else {
        if run.join("latest").exists() {
            return Err(Error::Config(format!(
                "{} already holds a run; pass --resume to continue it or choose another directory",
                run.display()
            )));
        }
        None
    };
    let (model_cfg, cfg) = match &resumed {
        Some(_) => read_config(run)?,
        None => (model_cfg.clone(), cfg.clone()),
    };
    model_cfg.validate()?;
    if cfg.steps == 0 || cfg.seq_len == 0 || cfg.batch == 0 {
        return Err(Error::Config(
            "steps, seq_len and batch must be positive".into(),
        ));
    }
    std::fs::create_dir_all(run).map_err(io(run))?;
    if resumed.is_none() {
        let json = serde_json::json!({ "model": model_cfg, "train": cfg });
        let text = serde_json::to_vec_pretty(&json).map_err(|e| Error::Config(e.to_string()))?;
        checkpoint::write_atomic(&run.join("config.json"), &text)?;
    }

    let tokenizer = Tokenizer::load(cfg.tokenizer.as_deref())?;
    if model_cfg.vocab_size < tokenizer.vocab_size() {
        return Err(Error::Config(format!(
            "the model's vocab_size {} is smaller than the tokenizer's {} ids ({})",
            model_cfg.vocab_size,
            tokenizer.vocab_size(),
            tokenizer.describe()
        )));
    }
    let corpus = Corpus::load_with(cfg.corpus.as_deref(), &tokenizer)?;
    let split = corpus.split(cfg.held_out)?;
    let separator = tokenizer.encode("\n\n")?;
    let batcher = Batcher::with_separator(&split.train, &separator, cfg.seq_len, cfg.batch)?;

    let (mut store, start, mut rng) = match &resumed {
        Some(c) => (
            ParamStore::from_tensors(device, c.model.clone()),
            c.state.step,
            c.state.rng,
        ),
        None => (
            ParamStore::fresh(device, cfg.seed),
            0,
            SplitMix64::new(cfg.seed ^ 0x00DA_7A00_5EED),
        ),
    };
    let model = Model::new(&model_cfg, &mut store)?;
    let params = store.trainable().clone();
    let mut recorder = match &opts.record {
        // A resumed run keeps the initial weights recorded when it started.
        Some(dir) => Some(BatchRecorder::open(
            dir,
            start,
            2 * cfg.batch * cfg.seq_len,
            resumed.is_none().then(|| store.state_dict()),
        )?),
        None => None,
    };
    let mut opt = AdamW::new(cfg.adamw, &params)?;
    if let Some(c) = &resumed {
        opt.load_state(&c.optimizer, c.state.step)?;
    }
    let metrics_path = run.join("metrics.jsonl");
    rewrite_metrics(&metrics_path, start)?;
    let mut metrics = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&metrics_path)
        .map_err(io(&metrics_path))?;

    let backend = model.backend(cfg.attention, Purpose::Train)?;
    let end = opts.stop_after.map_or(cfg.steps, |s| s.min(cfg.steps));
    let bar = progress_bar(opts.progress, start, cfg.steps);
    let t0 = Instant::now();
    let tokens_per_step = (cfg.batch * cfg.seq_len) as f64;
    let mut losses = Vec::new();
    let mut last_ckpt = resumed.as_ref().map(|c| c.dir.clone());
    for step in start..end {
        let (x, y) = batcher.next(&mut rng, device)?;
        if let Some(r) = &mut recorder {
            r.write(&x, &y)?;
        }
        let logits = model.forward_at(&x, &backend, cfg.position_offset_at(step))?;
        let v = model_cfg.vocab_size;
        let loss = cross_entropy(&logits.reshape(((), v))?, &y.flatten_all()?)?;
        let loss_value: f32 = loss.to_scalar()?;
        if !loss_value.is_finite() {
            return Err(Error::Data(format!(
                "loss became {loss_value} at step {step}"
            )));
        }
        let grads = loss.backward()?;
        let (grads, norm) = clipped_gradients(&params, &grads, cfg.clip)?;
        let lr = learning_rate(step, cfg.steps, cfg.warmup, cfg.lr, cfg.min_lr_ratio);
        opt.update(&params, &grads, lr)?;
        let done = step + 1;
        losses.push((done, loss_value));
        let elapsed = t0.elapsed().as_secs_f64();
        let tps = (done - start) as f64 * tokens_per_step / elapsed.max(1e-9);
        if done.is_multiple_of(cfg.log_every.max(1)) || done == end {
            let m = Metrics {
                step: done,
                loss: loss_value,
                lr,
                grad_norm: norm,
                elapsed_s: elapsed,
                tokens_per_s: tps,
            };
            let line = serde_json::to_string(&m).map_err(|e| Error::Config(e.to_string()))?;
            writeln!(metrics, "{line}").map_err(io(&metrics_path))?;
        }
        if let Some(b) = &bar {
            b.set_position(done);
            b.set_message(format!("loss {loss_value:.4}  {tps:.0} tok/s"));
        }
        if done.is_multiple_of(cfg.checkpoint_every.max(1)) || done == end {
            let state = State {
                step: done,
                rng,
                model: model_cfg.clone(),
                train: cfg.clone(),
            };
            let dict: HashMap<String, Tensor> = store.state_dict().into_iter().collect();
            last_ckpt = Some(checkpoint::save(
                run,
                &state,
                &dict,
                &opt.state_tensors(),
                2,
            )?);
        }
    }
    if let Some(b) = bar {
        b.finish();
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let checkpoint = last_ckpt.ok_or_else(|| Error::Config("no step was run".into()))?;
    Ok(Outcome {
        tokens_per_s: (end.saturating_sub(start)) as f64 * tokens_per_step / elapsed.max(1e-9),
        losses,
        checkpoint,
    })
}

/// Drops metrics lines past `step` (left by a run killed after its last checkpoint), so the
/// resumed run's lines follow on without duplicates.
fn rewrite_metrics(path: &Path, step: u64) -> Result<()> {
    if !path.exists() {
        return Ok(());
    }
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| serde_json::from_str::<Metrics>(l).is_ok_and(|m| m.step <= step))
        .collect();
    let mut out = kept.join("\n");
    if !out.is_empty() {
        out.push('\n');
    }
    checkpoint::write_atomic(path, out.as_bytes())
}

fn progress_bar(show: bool, start: u64, total: u64) -> Option<indicatif::ProgressBar> {
    if !show {
        return None;
    }
    let bar = indicatif::ProgressBar::new(total);
    let style = indicatif::ProgressStyle::with_template(
        "{elapsed_precise} [{bar:30}] {pos}/{len} steps  {msg}  ETA {eta}",
    )
    .map(|s| s.progress_chars("=> "));
    if let Ok(s) = style {
        bar.set_style(s);
    }
    bar.set_position(start);
    Some(bar)
}
