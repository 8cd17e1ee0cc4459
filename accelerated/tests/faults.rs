//! Faults injected on purpose into tiny training runs, each with the exact outcome it must get:
//! damaged checkpoints (flipped bytes, truncation, a missing manifest), a write that fails
//! mid-save, divergence (a learning rate of 1000, a NaN loss injected into a checkpoint), and
//! a non-finite FIRE weight reaching the fused kernels. The `fire-lm` command line's wording
//! of the same faults is in `fire_lm_faults.rs`.

#![allow(clippy::unwrap_used)] // tests may unwrap (workspace rule)

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use candle_core::{Device, Tensor};
use fire_accelerated::attention::{AttentionPath, Purpose};
use fire_accelerated::config::{EncodingConfig, FireConfig, ModelConfig};
use fire_accelerated::error::Fallback;
use fire_accelerated::params::ParamStore;
use fire_accelerated::train::checkpoint::manifest::{sha256_hex, Manifest, MANIFEST};
use fire_accelerated::train::checkpoint::{
    self, Disk, Integrity, ResumeFrom, Storage, MODEL, OPTIMIZER, STATE,
};
use fire_accelerated::train::{self, Metrics, Options, TrainConfig};
use fire_accelerated::{Error, Model};

fn model() -> ModelConfig {
    ModelConfig {
        d_model: 32,
        n_layers: 2,
        n_heads: 2,
        d_ff: 64,
        ..ModelConfig::tiny(EncodingConfig::Fire(FireConfig {
            l_init: 8.0,
            ..FireConfig::default()
        }))
    }
}

fn train_cfg(steps: u64) -> TrainConfig {
    TrainConfig {
        seq_len: 32,
        batch: 4,
        steps,
        warmup: 1,
        lr: 1e-2,
        checkpoint_every: 2,
        log_every: 1,
        ..TrainConfig::default()
    }
}

fn opts(run: &Path) -> Options {
    Options {
        run: run.to_path_buf(),
        ..Options::default()
    }
}

fn ckpt(run: &Path, step: u64) -> PathBuf {
    run.join("checkpoints").join(checkpoint::step_name(step))
}

fn names(run: &Path) -> Vec<String> {
    checkpoint::list(run)
        .unwrap()
        .iter()
        .map(|(s, _)| checkpoint::step_name(*s))
        .collect()
}

fn latest(run: &Path) -> String {
    std::fs::read_to_string(run.join("latest")).unwrap()
}

fn metrics(run: &Path) -> Vec<Metrics> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A run of `steps` steps stopped after `stop`, with a checkpoint every 2, keeping `keep`.
fn trained(run: &Path, steps: u64, stop: u64, keep: usize) {
    let o = Options {
        keep_checkpoints: keep,
        stop_after: Some(stop),
        ..opts(run)
    };
    train::train(&model(), &train_cfg(steps), &o, &Device::Cpu).unwrap();
}

fn resume(run: &Path, from: Option<ResumeFrom>) -> Options {
    Options {
        resume: true,
        resume_from: from,
        ..opts(run)
    }
}

/// The message a damaged file gets: the size check first, then the digest.
fn digest_mismatch(file: &Path, recorded: &str) -> String {
    let got = sha256_hex(&std::fs::read(file).unwrap());
    format!(
        "does not match its manifest: SHA-256 {}… but {}… was recorded (the file changed after \
         it was written)",
        &got[..12],
        &recorded[..12]
    )
}

fn recorded(dir: &Path, file: &str) -> (u64, String) {
    let m = Manifest::parse(&std::fs::read(dir.join(MANIFEST)).unwrap()).unwrap();
    let e = m.entry(file).unwrap();
    (e.bytes, e.sha256.clone())
}

#[test]
fn flipped_bytes_are_refused_naming_the_file_and_the_checkpoint_to_fall_back_to() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    trained(&run, 8, 6, 2);
    // --keep-checkpoints 2: the newest two of step-2, -4, -6.
    assert_eq!(names(&run), ["step-0000004", "step-0000006"]);
    assert_eq!(latest(&run), "step-0000006");

    let (dir, good) = (ckpt(&run, 6), ckpt(&run, 4));
    let file = dir.join(MODEL);
    let mut bytes = std::fs::read(&file).unwrap();
    let n = bytes.len();
    bytes[n - 100] ^= 0x10;
    bytes[n - 7] ^= 0x01;
    std::fs::write(&file, &bytes).unwrap();

    let expected = format!(
        "checkpoint {}: model.safetensors {}; the newest checkpoint that verifies is {}",
        dir.display(),
        digest_mismatch(&file, &recorded(&dir, MODEL).1),
        good.display()
    );
    // Evaluation and resume both refuse it, with the same words.
    let err = checkpoint::load(&run, &Device::Cpu).unwrap_err();
    assert_eq!(err.to_string(), expected);
    match &err {
        Error::Corrupt {
            checkpoint,
            file,
            fallback,
            ..
        } => {
            assert_eq!((checkpoint, file.as_str()), (&dir, MODEL));
            assert_eq!(fallback, &Fallback::Verified(good.clone()));
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    let err = train::train(&model(), &train_cfg(6), &resume(&run, None), &Device::Cpu);
    assert_eq!(err.unwrap_err().to_string(), expected);

    // `verify` names the one checkpoint that fails.
    let verdicts = checkpoint::verify_run(&run).unwrap();
    assert_eq!(verdicts[0].result, Ok(Integrity::Verified));
    let p = verdicts[1].result.clone().unwrap_err();
    assert_eq!((p.file.as_str(), verdicts[1].step), (MODEL, 6));

    // The explicit fallback: continue from step-4; step-6 is set aside, not deleted, and the
    // run's new step-6 verifies.
    let from = resume(&run, Some(ResumeFrom::Step(4)));
    train::train(&model(), &train_cfg(8), &from, &Device::Cpu).unwrap();
    let aside = run.join("checkpoints/superseded/step-0000006");
    assert_eq!(std::fs::read(aside.join(MODEL)).unwrap(), bytes);
    assert_eq!(
        names(&run),
        ["step-0000004", "step-0000006", "step-0000008"]
    );
    assert!(checkpoint::verify_run(&run)
        .unwrap()
        .iter()
        .all(|v| v.result == Ok(Integrity::Verified)));
    let steps: Vec<u64> = metrics(&run).iter().map(|m| m.step).collect();
    assert_eq!(steps, [1, 2, 3, 4, 5, 6, 7, 8]);
}

#[test]
fn truncation_is_refused_naming_the_file_and_the_previous_good_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    trained(&run, 4, 4, 3);
    let (dir, good) = (ckpt(&run, 4), ckpt(&run, 2));
    let file = dir.join(MODEL);
    let size = recorded(&dir, MODEL).0;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(5000)
        .unwrap();
    let err = checkpoint::load(&run, &Device::Cpu).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "checkpoint {}: model.safetensors is 5000 bytes but its manifest records {size} \
             (truncated since it was written); the newest checkpoint that verifies is {}",
            dir.display(),
            good.display()
        )
    );

    // Without a manifest (a checkpoint of an older fire-lm) the file is still named, and the
    // parser's complaint comes after it rather than alone.
    std::fs::remove_file(dir.join(MANIFEST)).unwrap();
    let err = checkpoint::load(&run, &Device::Cpu)
        .unwrap_err()
        .to_string();
    let prefix = format!(
        "checkpoint {}: model.safetensors is not a readable safetensors file (",
        dir.display()
    );
    assert!(err.starts_with(&prefix), "{err}");
    assert!(
        err.ends_with(&format!(
            "); the newest checkpoint that verifies is {}",
            good.display()
        )),
        "{err}"
    );
    // An intact checkpoint without a manifest loads, marked unverified.
    std::fs::remove_file(good.join(MANIFEST)).unwrap();
    let loaded = checkpoint::load(&good, &Device::Cpu).unwrap();
    assert_eq!(loaded.integrity, Integrity::Unverified);
}

/// The disk fills up while the `nth` copy of `file` is written: half its bytes land, the rest
/// go to `/dev/full`, whose write fails with the kernel's own "no space left on device".
#[derive(Debug)]
struct FillsUp {
    file: &'static str,
    nth: usize,
    seen: AtomicUsize,
}

impl FillsUp {
    fn new(file: &'static str, nth: usize) -> Arc<Self> {
        Arc::new(Self {
            file,
            nth,
            seen: AtomicUsize::new(0),
        })
    }
}

impl Storage for FillsUp {
    fn write(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        let ours = path.file_name().is_some_and(|n| n == self.file);
        if !ours || self.seen.fetch_add(1, Ordering::SeqCst) + 1 != self.nth {
            return Disk.write(path, bytes);
        }
        let (head, tail) = bytes.split_at(bytes.len() / 2);
        std::fs::File::create(path)?.write_all(head)?;
        match std::fs::OpenOptions::new().write(true).open("/dev/full") {
            Ok(mut full) => full.write_all(tail).and_then(|()| full.sync_all()),
            // Not Linux: the same error, made by hand.
            Err(_) => Err(std::io::Error::from_raw_os_error(28)),
        }
    }
}

#[test]
fn a_save_that_fails_mid_write_leaves_the_previous_checkpoint_and_latest_intact() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    // The third model.safetensors (step-6's) hits a full disk.
    let o = Options {
        storage: Some(FillsUp::new(MODEL, 3)),
        ..opts(&run)
    };
    let err = train::train(&model(), &train_cfg(8), &o, &Device::Cpu).unwrap_err();
    assert!(matches!(err, Error::Save { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "saving checkpoint step-0000006 failed: {}: No space left on device (os error 28); \
             the previous checkpoint {} and `latest` are unchanged",
            run.join("checkpoints/.tmp-step-0000006")
                .join(MODEL)
                .display(),
            ckpt(&run, 4).display()
        )
    );
    // The run stopped there: nothing half-written, the older checkpoints whole.
    assert_eq!(latest(&run), "step-0000004");
    let entries: Vec<String> = std::fs::read_dir(run.join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(entries, ["step-0000002", "step-0000004"]);
    assert!(checkpoint::verify_run(&run)
        .unwrap()
        .iter()
        .all(|v| v.result == Ok(Integrity::Verified)));
    assert_eq!(metrics(&run).last().unwrap().step, 6);
    // And it resumes from what it kept.
    let out = train::train(&model(), &train_cfg(8), &resume(&run, None), &Device::Cpu).unwrap();
    assert_eq!(out.checkpoint, ckpt(&run, 8));

    // The disk fills up while `latest` is repointed: the new checkpoint is withdrawn.
    let run = tmp.path().join("run2");
    let o = Options {
        storage: Some(FillsUp::new("latest.tmp", 2)),
        ..opts(&run)
    };
    let err = train::train(&model(), &train_cfg(8), &o, &Device::Cpu).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "saving checkpoint step-0000004 failed: {}: No space left on device (os error 28); \
             the previous checkpoint {} and `latest` are unchanged",
            run.join("latest.tmp").display(),
            ckpt(&run, 2).display()
        )
    );
    assert_eq!(latest(&run), "step-0000002");
    assert_eq!(names(&run), ["step-0000002"]);
    assert!(!run.join("latest.tmp").exists());
}

#[test]
fn a_learning_rate_of_1000_stops_as_diverged_without_saving_anything_non_finite() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let cfg = TrainConfig {
        lr: 1000.0,
        ..train_cfg(40)
    };
    let err = train::train(&model(), &cfg, &opts(&run), &Device::Cpu).unwrap_err();
    let Error::Diverged {
        step,
        what,
        last_good,
    } = &err
    else {
        panic!("expected Diverged, got {err:?}");
    };
    // Where it diverges depends on float rounding; what is said about it does not.
    assert_eq!(last_good.as_deref(), Some(latest(&run).as_str()));
    assert!(what.starts_with("loss "), "{what}");
    assert_eq!(
        err.to_string(),
        format!(
            "diverged at step {step} ({what}); last good checkpoint {}; try a lower learning \
             rate",
            latest(&run)
        )
    );
    // The failing step's metrics line is written, marked; no checkpoint at or after it, and
    // every checkpoint kept is finite and whole.
    let last = metrics(&run).pop().unwrap();
    assert_eq!(last.step, *step);
    assert_eq!(
        last.fault.as_deref(),
        Some(format!("diverged ({what})").as_str())
    );
    assert!(checkpoint::list(&run)
        .unwrap()
        .iter()
        .all(|(s, _)| s < step));
    assert!(checkpoint::verify_run(&run)
        .unwrap()
        .iter()
        .all(|v| v.result == Ok(Integrity::Verified)));
}

/// Makes checkpoint `dir`'s next loss NaN: token embeddings and a final layer-norm gain of
/// 1e20 make logits of ±1e40, which overflow f32 to ±inf, and softmax's inf − inf is NaN.
/// The manifest is rewritten, so only the loss can give the fault away.
fn inject_nan_loss(dir: &Path) {
    let file = dir.join(MODEL);
    let mut tensors: HashMap<String, Tensor> =
        candle_core::safetensors::load(&file, &Device::Cpu).unwrap();
    for name in ["embed.weight", "ln_f.weight"] {
        let big = (&tensors[name] * 1e20).unwrap();
        tensors.insert(name.into(), big);
    }
    candle_core::safetensors::save(&tensors, &file).unwrap();
    let mut m = Manifest::default();
    for f in [MODEL, OPTIMIZER, STATE] {
        m.record(f, &std::fs::read(dir.join(f)).unwrap());
    }
    std::fs::write(dir.join(MANIFEST), serde_json::to_vec(&m).unwrap()).unwrap();
}

#[test]
fn an_injected_nan_loss_stops_at_that_step_or_is_skipped_when_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    trained(&run, 6, 2, 3);
    inject_nan_loss(&ckpt(&run, 2));
    let saved = std::fs::read(ckpt(&run, 2).join(MODEL)).unwrap();

    let err = train::train(&model(), &train_cfg(6), &resume(&run, None), &Device::Cpu);
    assert_eq!(
        err.unwrap_err().to_string(),
        "diverged at step 3 (loss NaN / grad-norm NaN); last good checkpoint step-0000002; try \
         a lower learning rate"
    );
    let last = metrics(&run).pop().unwrap();
    assert_eq!(
        (last.step, last.fault.as_deref()),
        (3, Some("diverged (loss NaN / grad-norm NaN)"))
    );
    assert!(last.loss.is_nan() && last.grad_norm.is_nan());
    assert_eq!(names(&run), ["step-0000002"]);

    // Skipping two in a row is allowed when asked for; the third stops the run. Nothing is
    // updated from a NaN, so the weights stay as loaded.
    let o = Options {
        skip_nonfinite: 2,
        ..resume(&run, None)
    };
    let err = train::train(&model(), &train_cfg(6), &o, &Device::Cpu).unwrap_err();
    assert_eq!(
        err.to_string(),
        "diverged at step 5 (loss NaN / grad-norm NaN); last good checkpoint step-0000004; try \
         a lower learning rate"
    );
    let faults: Vec<(u64, String)> = metrics(&run)
        .into_iter()
        .filter_map(|m| Some((m.step, m.fault?)))
        .collect();
    let words = "(loss NaN / grad-norm NaN)";
    assert_eq!(
        faults,
        [
            (3, format!("skipped {words}")),
            (4, format!("skipped {words}")),
            (5, format!("diverged {words}")),
        ]
    );
    // Step-4 is saved as the run went on, with the weights it loaded: nothing was updated from
    // a NaN.
    assert_eq!(names(&run), ["step-0000002", "step-0000004"]);
    assert_eq!(std::fs::read(ckpt(&run, 4).join(MODEL)).unwrap(), saved);
}

#[test]
fn a_non_finite_fire_weight_is_named_by_layer_not_by_the_kernels_word() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    trained(&run, 6, 2, 3);
    let mut tensors = checkpoint::load(&run, &Device::Cpu).unwrap().model;
    let name = "layers.1.attn.fire.mlp.0.weight";
    let mut w: Vec<f32> = tensors[name].flatten_all().unwrap().to_vec1().unwrap();
    w[3] = f32::NAN;
    let shape = tensors[name].shape().clone();
    tensors.insert(
        name.into(),
        Tensor::from_vec(w, shape, &Device::Cpu).unwrap(),
    );
    let mut store = ParamStore::from_tensors(&Device::Cpu, tensors.clone());
    let m = Model::new(&model(), &mut store).unwrap();
    let x = Tensor::zeros((1, 8), candle_core::DType::U32, &Device::Cpu).unwrap();

    let train = m.backend(AttentionPath::Fused, Purpose::Train).unwrap();
    let err = m.forward(&x, &train, None).unwrap_err().to_string();
    assert_eq!(
        err,
        "invalid input: FIRE MLP weights of layer 1 are not finite (NaN at element 3 of f_θ's \
         weights and biases): the weights diverged or were damaged"
    );
    // Inference tabulates the bias when its backend is built, and refuses there.
    let eval = m.backend(
        AttentionPath::Fused,
        Purpose::Infer {
            capacity: 8,
            chunk: 8,
        },
    );
    assert_eq!(
        eval.unwrap_err().to_string(),
        "invalid input: FIRE mlp.0.weight of layer 1: must be finite, got NaN at element 3"
    );

    // Saved by hand (fire-lm itself never saves one), such a checkpoint is refused on load by
    // the weight's name.
    let dir = ckpt(&run, 2);
    candle_core::safetensors::save(&tensors, dir.join(MODEL)).unwrap();
    std::fs::remove_file(dir.join(MANIFEST)).unwrap();
    let err = checkpoint::load(&dir, &Device::Cpu)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        format!(
            "checkpoint {}: model.safetensors is not finite: `{name}` (FIRE mlp.0.weight of \
             layer 1) holds NaN at element 3; no other checkpoint of this run verifies",
            dir.display()
        )
    );
}

#[test]
fn an_update_that_makes_a_weight_non_finite_stops_before_the_next_step_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    // 1e39 is a finite f64 but infinite as the f32 the update multiplies by: the loss and the
    // gradient norm of step 1 are finite, the weights after its update are not.
    let cfg = TrainConfig {
        lr: 1e39,
        warmup: 0,
        ..train_cfg(4)
    };
    let err = train::train(&model(), &cfg, &opts(&run), &Device::Cpu).unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("diverged at step 1 (loss "), "{text}");
    assert!(
        text.contains("; after the update `embed.weight` (token embedding weight) holds "),
        "{text}"
    );
    assert!(
        text.ends_with("; no checkpoint saved yet; try a lower learning rate"),
        "{text}"
    );
    let m = metrics(&run);
    assert_eq!(m.len(), 1);
    assert!(m[0].loss.is_finite() && m[0].grad_norm.is_finite());
    assert!(m[0]
        .fault
        .as_deref()
        .unwrap()
        .starts_with("diverged (loss "));
    assert!(!run.join("latest").exists() && names(&run).is_empty());
}
