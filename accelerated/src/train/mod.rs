//! Training: AdamW, warmup + cosine decay, global-norm clipping, seeded batches, JSON-lines
//! metrics, verified atomic checkpoints ([`checkpoint`]) and exact resume.
//!
//! Everything a step depends on — parameters, AdamW moments and step, the data RNG — is in the
//! checkpoint, so a resumed run repeats the uninterrupted run's losses bit for bit (on the same
//! device and thread count).
//!
//! Every step checks its loss and gradient norm before the update and the parameters after it
//! ([`finite`]): a run that diverges stops there with [`Error::Diverged`] — its metrics line
//! written, no update applied from a non-finite gradient, nothing non-finite saved — instead
//! of failing one step later inside a kernel that sees a NaN weight.

pub mod checkpoint;
mod config;
pub mod finite;
mod record;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
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
use checkpoint::{Integrity, ResumeFrom, State, Storage};
use finite::{first_nonfinite, words};

/// How to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The run directory (config, metrics, checkpoints).
    pub run: PathBuf,
    /// Continue from the run's latest checkpoint (or from [`Self::resume_from`]).
    pub resume: bool,
    /// Continue from this checkpoint instead of `latest` (implies [`Self::resume`]); newer
    /// checkpoints are moved to `checkpoints/superseded/`, never deleted.
    pub resume_from: Option<ResumeFrom>,
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
    /// Checkpoints to keep (the newest; at least 1). Two or more leave an older checkpoint to
    /// fall back to if the newest is damaged.
    pub keep_checkpoints: usize,
    /// Consecutive steps with a non-finite loss or gradient norm to skip (no update, the
    /// batch consumed) before the run is declared diverged. 0, the default, stops at the
    /// first: a skipped step hides a problem, so skipping is chosen explicitly. A policy of
    /// this process, not of the run: a resumed run may choose differently.
    pub skip_nonfinite: u64,
    /// Where checkpoints are written (`None`: the local disk, [`checkpoint::Disk`]).
    pub storage: Option<Arc<dyn Storage>>,
    /// Receives notes a user should see (a checkpoint loaded without a manifest, checkpoints
    /// set aside by `resume_from`, a skipped step); `None` drops them.
    pub on_note: Option<fn(&str)>,
    /// Time each part of every step after the first `w` of this process ([`crate::timing`]:
    /// the step's phases and the fused block's parts) and return the sums in
    /// [`Outcome::timings`]. The timers are the training thread's own.
    pub timings_after: Option<u64>,
}

/// The checkpoints a run keeps by default: the newest and two to fall back to.
pub const KEEP_CHECKPOINTS: usize = 3;

impl Default for Options {
    fn default() -> Self {
        Self {
            run: PathBuf::new(),
            resume: false,
            resume_from: None,
            stop_after: None,
            record: None,
            progress: false,
            keep_checkpoints: KEEP_CHECKPOINTS,
            skip_nonfinite: 0,
            storage: None,
            on_note: None,
            timings_after: None,
        }
    }
}

impl Options {
    fn note(&self, text: &str) {
        if let Some(f) = self.on_note {
            f(text);
        }
    }
}

/// One metrics line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Steps completed.
    pub step: u64,
    /// Training loss of this step's batch (nats/token) before the update (`null` in the
    /// file when not finite).
    #[serde(deserialize_with = "number_or_null_f32")]
    pub loss: f32,
    /// Learning rate used.
    pub lr: f64,
    /// Gradient norm before clipping (`null` in the file when not finite or not computed).
    #[serde(deserialize_with = "number_or_null_f64")]
    pub grad_norm: f64,
    /// Seconds since this process started training.
    pub elapsed_s: f64,
    /// Tokens per second in this process so far.
    pub tokens_per_s: f64,
    /// Set on a step whose values were not finite: `diverged (…)` when the run stopped there,
    /// `skipped (…)` when the update was skipped ([`Options::skip_nonfinite`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<String>,
}

/// JSON has no NaN: serde_json writes a non-finite float as `null`, read back here as NaN.
fn number_or_null_f64<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

fn number_or_null_f32<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<f32, D::Error> {
    Ok(Option::<f32>::deserialize(d)?.unwrap_or(f32::NAN))
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
    /// With [`Options::timings_after`]: the steps timed and each part's totals over them
    /// (`step` is the whole step).
    pub timings: Option<(u64, Vec<crate::timing::Part>)>,
}

/// The model and training settings a run was started with (its `config.json`), which a resume
/// keeps.
pub fn read_config(run: &Path) -> Result<(ModelConfig, TrainConfig)> {
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
    let resumed = if opts.resume || opts.resume_from.is_some() {
        Some(resume(opts, device)?)
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
    cfg.validate()?;
    // create_dir_all would say only "File exists".
    if run.exists() && !run.is_dir() {
        return Err(Error::Config(format!(
            "{} is not a directory: the run's directory holds its settings, metrics and checkpoints",
            run.display()
        )));
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
    if let Some(c) = &resumed {
        checkpoint::check_no_extra_tensors(&c.dir, &store, &c.model)?;
    }
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
    let mut log = |m: &Metrics| -> Result<()> {
        let line = serde_json::to_string(m).map_err(|e| Error::Config(e.to_string()))?;
        writeln!(metrics, "{line}").map_err(io(&metrics_path))
    };

    let backend = model.backend(cfg.attention, Purpose::Train)?;
    let end = opts.stop_after.map_or(cfg.steps, |s| s.min(cfg.steps));
    let bar = progress_bar(opts.progress, start, cfg.steps);
    let note = |text: &str| match &bar {
        Some(b) => b.suspend(|| opts.note(text)),
        None => opts.note(text),
    };
    let storage: &dyn Storage = opts.storage.as_deref().unwrap_or(&checkpoint::Disk);
    let t0 = Instant::now();
    let tokens_per_step = (cfg.batch * cfg.seq_len) as f64;
    let mut losses = Vec::new();
    let mut last_ckpt = resumed.as_ref().map(|c| c.dir.clone());
    let mut skipped_in_a_row = 0u64;
    let timed_from = opts.timings_after.map(|w| start.saturating_add(w));
    if timed_from.is_some() {
        crate::timing::reset();
    }
    // Turns the timers off however the loop ends.
    let _timers = Timers::on(timed_from.is_some_and(|from| from < end));
    for step in start..end {
        let done = step + 1;
        if Some(step) == timed_from {
            crate::timing::reset();
        }
        let step_start = Instant::now();
        let (x, y) = crate::timing::time("step: batch", || batcher.next(&mut rng, device))?;
        if let Some(r) = &mut recorder {
            r.write(&x, &y)?;
        }
        let offset = cfg.position_offset_at(step);
        // Through the fused ops the backward pass is written out (`Model::fused_step`);
        // elsewhere (CUDA, the candle attention, blocks as candle ops) autograd runs it.
        let fused = model.fused_step(&x, &y, &backend, offset)?;
        let (loss_value, backward) = match fused {
            Some(step) => (step.loss, Ok(step.grads)),
            None => {
                let logits = crate::timing::time("step: forward", || {
                    model.forward_at(&x, &backend, offset)
                })?;
                let v = model_cfg.vocab_size;
                let (loss, loss_value) =
                    crate::timing::time("step: loss", || -> Result<(Tensor, f32)> {
                        let loss = cross_entropy(&logits.reshape(((), v))?, &y.flatten_all()?)?;
                        let value: f32 = loss.to_scalar()?;
                        Ok((loss, value))
                    })?;
                let grads = crate::timing::time("step: backward", || loss.backward());
                (loss_value, grads.map_err(Error::from))
            }
        };
        let lr = learning_rate(step, cfg.steps, cfg.warmup, cfg.lr, cfg.min_lr_ratio);
        // A non-finite loss still gets its gradient norm where one can be computed, for the
        // message; a failure to compute it is then part of the divergence, not a new error.
        let gradients = backward.and_then(|g| {
            crate::timing::time("step: clipping", || {
                clipped_gradients(&params, &g, cfg.clip)
            })
        });
        let (grads, norm) = match gradients {
            Ok(g) => g,
            Err(_) if !loss_value.is_finite() => (Default::default(), f64::NAN),
            Err(e) => return Err(e),
        };
        let elapsed = t0.elapsed().as_secs_f64();
        let tps = (done - start) as f64 * tokens_per_step / elapsed.max(1e-9);
        let mut m = Metrics {
            step: done,
            loss: loss_value,
            lr,
            grad_norm: norm,
            elapsed_s: elapsed,
            tokens_per_s: tps,
            fault: None,
        };
        losses.push((done, loss_value));
        let last_good = || last_ckpt.as_deref().and_then(dir_name);
        let values = format!(
            "loss {} / grad-norm {}",
            words(f64::from(loss_value)),
            words(norm)
        );
        if loss_value.is_finite() && norm.is_finite() {
            skipped_in_a_row = 0;
            crate::timing::time("step: AdamW", || opt.update(&params, &grads, lr))?;
            // Before the next forward pass and before any save: a weight the update made
            // non-finite stops the run here, by name.
            let current = params.iter().map(|(n, p)| (n.as_str(), p.as_tensor()));
            if let Some(bad) =
                crate::timing::time("step: finite check", || first_nonfinite(current))?
            {
                m.fault = Some(format!("diverged ({values} / {bad})"));
                log(&m)?;
                return Err(Error::Diverged {
                    step: done,
                    what: format!("{values}; after the update {bad}"),
                    last_good: last_good(),
                });
            }
        } else if skipped_in_a_row < opts.skip_nonfinite {
            skipped_in_a_row += 1;
            m.fault = Some(format!("skipped ({values})"));
            note(&format!(
                "step {done}: {values}; update skipped ({skipped_in_a_row} of at most {} in a row)",
                opts.skip_nonfinite
            ));
        } else {
            m.fault = Some(format!("diverged ({values})"));
            log(&m)?;
            return Err(Error::Diverged {
                step: done,
                what: values,
                last_good: last_good(),
            });
        }
        if done.is_multiple_of(cfg.log_every.max(1)) || done == end || m.fault.is_some() {
            log(&m)?;
        }
        if let Some(b) = &bar {
            b.set_position(done);
            b.set_message(format!("loss {loss_value:.4}  {tps:.0} tok/s"));
        }
        // Checkpoints are timed on their own, outside the step: a few per run, each costing
        // many steps' time.
        crate::timing::add("step", step_start.elapsed().as_secs_f64());
        if done.is_multiple_of(cfg.checkpoint_every.max(1)) || done == end {
            let state = State {
                step: done,
                rng,
                model: model_cfg.clone(),
                train: cfg.clone(),
            };
            let dict: HashMap<String, Tensor> = store.state_dict().into_iter().collect();
            let moments = opt.state_tensors();
            // The parameters were checked after this step's update; the moments are checked
            // here, so no checkpoint ever holds a non-finite number.
            let mut names: Vec<&String> = moments.keys().collect();
            names.sort();
            if let Some(bad) = first_nonfinite(names.iter().map(|n| (n.as_str(), &moments[*n])))? {
                return Err(Error::Diverged {
                    step: done,
                    what: format!("{values}; {bad}"),
                    last_good: last_good(),
                });
            }
            last_ckpt = Some(crate::timing::time(
                "checkpoints (outside the step)",
                || {
                    checkpoint::save_with(
                        run,
                        &state,
                        &dict,
                        &moments,
                        opts.keep_checkpoints,
                        storage,
                    )
                },
            )?);
        }
    }
    if let Some(b) = bar {
        b.finish();
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let checkpoint = last_ckpt.ok_or_else(|| Error::Config("no step was run".into()))?;
    let timings = timed_from
        .filter(|&from| from < end)
        .map(|from| (end - from, crate::timing::parts()));
    Ok(Outcome {
        tokens_per_s: (end.saturating_sub(start)) as f64 * tokens_per_step / elapsed.max(1e-9),
        losses,
        checkpoint,
        timings,
    })
}

/// The timers on for a timed run, off again when dropped (also on an early return or a panic).
struct Timers(bool);

impl Timers {
    fn on(on: bool) -> Self {
        if on {
            crate::timing::enable(true);
        }
        Self(on)
    }
}

impl Drop for Timers {
    fn drop(&mut self) {
        if self.0 {
            crate::timing::enable(false);
        }
    }
}

/// A directory's last component (`step-0000040`).
fn dir_name(dir: &Path) -> Option<String> {
    dir.file_name().map(|n| n.to_string_lossy().into_owned())
}

/// Loads the checkpoint a resume continues from, verified, and makes it the run's newest.
fn resume(opts: &Options, device: &Device) -> Result<checkpoint::Loaded> {
    let run = &opts.run;
    let from = opts.resume_from.clone().unwrap_or_default();
    let dir = checkpoint::select(run, &from)?;
    let loaded = checkpoint::load(&dir, device)?;
    if loaded.integrity == Integrity::Unverified {
        opts.note(&format!(
            "{} has no manifest (written before checkpoints recorded SHA-256 digests): resuming \
             without an integrity check; the checkpoints this run writes carry one",
            loaded.dir.display()
        ));
    }
    for (from, to) in checkpoint::rewind(run, &loaded.dir)? {
        opts.note(&format!(
            "continuing from {}: moved the newer {} aside to {}",
            loaded.dir.display(),
            from.display(),
            to.display()
        ));
    }
    Ok(loaded)
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
