//! Checkpoints: a directory `step-NNNNNNN/` holding `model.safetensors` (the state dict),
//! `optimizer.safetensors` (AdamW moments), `state.json` (step, RNG state, configs) and
//! `manifest.json` (the size and SHA-256 of each of those, [`manifest`]).
//!
//! Writes are atomic: the directory is written under a temporary name, its manifest last, and
//! renamed into place; then the run's `latest` file (itself written to a temporary file and
//! renamed) is pointed at it. A run killed at any moment leaves either the previous checkpoint
//! or the new one, never a torn one; a save that fails (a full disk, an unwritable directory)
//! removes what it wrote and leaves the previous checkpoint and `latest` as they were.
//!
//! Reads verify: every file's size and digest must match the manifest, and the weights must be
//! finite, or the load is refused naming the file, the checkpoint and the newest checkpoint of
//! the run that does verify ([`Error::Corrupt`]). A checkpoint written before manifests existed
//! still loads — its files must parse and its weights be finite — reported as
//! [`Integrity::Unverified`] so the caller can say so: refusing it would strand every run
//! trained before, and the next checkpoint a resumed run writes carries a manifest.

pub mod manifest;
mod run;
mod storage;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use fire_vocabulary::SplitMix64;
use serde::{Deserialize, Serialize};

use super::config::TrainConfig;
use super::finite::first_nonfinite_view;
use crate::config::ModelConfig;
use crate::error::{io, Error, Fallback, Result};
use crate::model::Model;
use crate::params::ParamStore;
use manifest::{Manifest, MANIFEST};
pub use run::{list, newest_good, rewind, select, step_name, verify_run, ResumeFrom, Verdict};
pub use storage::{Disk, Storage};

/// The model's state dict.
pub const MODEL: &str = "model.safetensors";
/// The optimizer's moments.
pub const OPTIMIZER: &str = "optimizer.safetensors";
/// Step, data RNG and configurations.
pub const STATE: &str = "state.json";

/// What a checkpoint records besides tensors.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    /// Optimizer steps completed.
    pub step: u64,
    /// The data RNG after `step` steps.
    pub rng: SplitMix64,
    /// The model.
    pub model: ModelConfig,
    /// The training run.
    pub train: TrainConfig,
}

/// How far a loaded checkpoint could be checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Integrity {
    /// Every file matches the size and SHA-256 its manifest recorded.
    Verified,
    /// No manifest (written before checkpoints carried one): the files parse and the weights
    /// are finite, but a flipped bit could not be told from a trained weight.
    Unverified,
}

/// A loaded checkpoint.
#[derive(Debug)]
pub struct Loaded {
    /// Its directory.
    pub dir: PathBuf,
    /// The state.
    pub state: State,
    /// The model's state dict.
    pub model: HashMap<String, Tensor>,
    /// The optimizer's tensors (empty if the file is absent, e.g. an exported model).
    pub optimizer: HashMap<String, Tensor>,
    /// Whether the files were checked against a manifest.
    pub integrity: Integrity,
}

/// What is wrong with one file of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file, relative to the checkpoint directory.
    pub file: String,
    /// What is wrong, worded to follow the file's name.
    pub reason: String,
}

impl Problem {
    fn new(file: &str, reason: impl Into<String>) -> Self {
        Self {
            file: file.into(),
            reason: reason.into(),
        }
    }

    /// The error for this problem in checkpoint `dir`, with the run's fallback looked up.
    fn into_error(self, dir: &Path) -> Error {
        Error::Corrupt {
            checkpoint: dir.to_path_buf(),
            file: self.file,
            reason: self.reason,
            fallback: run::run_of(dir).map_or(Fallback::None, |run| newest_good(run, Some(dir))),
        }
    }
}

/// Writes `bytes` to `path` atomically (temporary file in the same directory, flushed, then
/// renamed).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    storage::write_atomic(&Disk, path, bytes).map_err(|(p, e)| io(p)(e))
}

/// Saves a checkpoint under `run/checkpoints/step-NNNNNNN` and points `run/latest` at it;
/// keeps the newest `keep` checkpoints.
pub fn save(
    run: &Path,
    state: &State,
    model: &HashMap<String, Tensor>,
    optimizer: &HashMap<String, Tensor>,
    keep: usize,
) -> Result<PathBuf> {
    save_with(run, state, model, optimizer, keep, &Disk)
}

/// [`save`] through `storage`. On any failure the partial checkpoint is removed, `latest` and
/// every earlier checkpoint are untouched, and the error ([`Error::Save`]) names the path
/// whose write failed.
pub fn save_with(
    run: &Path,
    state: &State,
    model: &HashMap<String, Tensor>,
    optimizer: &HashMap<String, Tensor>,
    keep: usize,
    storage: &dyn Storage,
) -> Result<PathBuf> {
    let root = run.join("checkpoints");
    let name = step_name(state.step);
    let final_dir = root.join(&name);
    let tmp = root.join(format!(".tmp-{name}"));
    let kept = match std::fs::read_to_string(run.join("latest")) {
        Ok(prev) => format!(
            "the previous checkpoint {} and `latest` are unchanged",
            root.join(prev.trim()).display()
        ),
        Err(_) => "no earlier checkpoint exists".into(),
    };
    let fail = |path: &Path, error: std::io::Error| Error::Save {
        checkpoint: name.clone(),
        path: path.to_path_buf(),
        error,
        kept: kept.clone(),
    };

    // Encode everything before touching the disk: a tensor that cannot be encoded fails the
    // save with nothing written.
    let encode = |tensors: &HashMap<String, Tensor>, file: &str| {
        safetensors::serialize(tensors, None).map_err(|e| Error::Checkpoint {
            path: final_dir.join(file).display().to_string(),
            reason: format!("cannot encode the tensors: {e}"),
        })
    };
    let state_json = serde_json::to_vec_pretty(state).map_err(|e| Error::Checkpoint {
        path: final_dir.join(STATE).display().to_string(),
        reason: e.to_string(),
    })?;
    let files = [
        (MODEL, encode(model, MODEL)?),
        (OPTIMIZER, encode(optimizer, OPTIMIZER)?),
        (STATE, state_json),
    ];

    std::fs::create_dir_all(&root).map_err(|e| fail(&root, e))?;
    if tmp.symlink_metadata().is_ok() {
        // Left by a run killed mid-save.
        std::fs::remove_dir_all(&tmp).map_err(|e| fail(&tmp, e))?;
    }
    std::fs::create_dir(&tmp).map_err(|e| fail(&tmp, e))?;
    let written = (|| {
        let mut manifest = Manifest::default();
        for (file, bytes) in &files {
            let path = tmp.join(file);
            storage.write(&path, bytes).map_err(|e| fail(&path, e))?;
            manifest.record(file, bytes);
        }
        let text = serde_json::to_vec_pretty(&manifest).map_err(|e| Error::Checkpoint {
            path: MANIFEST.into(),
            reason: e.to_string(),
        })?;
        let path = tmp.join(MANIFEST);
        storage.write(&path, &text).map_err(|e| fail(&path, e))?;
        storage::sync_dir(&tmp).map_err(|e| fail(&tmp, e))?;
        if final_dir.symlink_metadata().is_ok() {
            std::fs::remove_dir_all(&final_dir).map_err(|e| fail(&final_dir, e))?;
        }
        std::fs::rename(&tmp, &final_dir).map_err(|e| fail(&final_dir, e))?;
        storage::sync_dir(&root).map_err(|e| fail(&root, e))
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    if let Err((path, e)) = storage::write_atomic(storage, &run.join("latest"), name.as_bytes()) {
        // `latest` still names the previous checkpoint; drop the new one so the run directory
        // is exactly as before the save.
        let _ = std::fs::remove_dir_all(&final_dir);
        return Err(fail(&path, e));
    }
    prune(&root, keep)?;
    Ok(final_dir)
}

/// Removes all but the newest `keep` (at least one) checkpoints.
fn prune(root: &Path, keep: usize) -> Result<()> {
    let all = list(root.parent().unwrap_or(root))?;
    let excess = all.len().saturating_sub(keep.max(1));
    for (_, dir) in &all[..excess] {
        std::fs::remove_dir_all(dir).map_err(io(dir))?;
    }
    Ok(())
}

/// The newest checkpoint directory of a run (via `latest`), or `path` itself when it is a
/// checkpoint directory.
pub fn resolve(path: &Path) -> Result<PathBuf> {
    let is_checkpoint = [STATE, MODEL, MANIFEST]
        .iter()
        .any(|f| path.join(f).is_file());
    if is_checkpoint {
        return Ok(path.to_path_buf());
    }
    if !path.exists() {
        return Err(Error::Checkpoint {
            path: path.display().to_string(),
            reason: "does not exist".into(),
        });
    }
    let latest = path.join("latest");
    let Ok(name) = std::fs::read_to_string(&latest) else {
        let reason = if path.join("config.json").is_file() {
            "is a run directory without a checkpoint yet (no `latest`)"
        } else {
            "is neither a run directory (no `latest`) nor a checkpoint directory (no state.json)"
        };
        return Err(Error::Checkpoint {
            path: path.display().to_string(),
            reason: reason.into(),
        });
    };
    let name = name.trim();
    let dir = path.join("checkpoints").join(name);
    if !name.starts_with("step-") || name.contains(['/', '\\']) || !dir.is_dir() {
        return Err(Error::Checkpoint {
            path: latest.display().to_string(),
            reason: format!(
                "names `{name}`, which is not a checkpoint of the run; {}",
                newest_good(path, None)
            ),
        });
    }
    Ok(dir)
}

/// The bytes of a checkpoint's files, checked against its manifest where it has one.
struct Files {
    state: Vec<u8>,
    model: Vec<u8>,
    optimizer: Option<Vec<u8>>,
    integrity: Integrity,
}

/// Reads `dir`'s files and checks each against the manifest (size, then SHA-256).
fn read_files(dir: &Path) -> std::result::Result<Files, Problem> {
    let manifest = match std::fs::read(dir.join(MANIFEST)) {
        Ok(bytes) => Some(Manifest::parse(&bytes).map_err(|r| Problem::new(MANIFEST, r))?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(Problem::new(MANIFEST, format!("cannot be read: {e}"))),
    };
    let read = |file: &str, required: bool| -> std::result::Result<Option<Vec<u8>>, Problem> {
        let entry = manifest.as_ref().map(|m| m.entry(file));
        let bytes = match std::fs::read(dir.join(file)) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if required || matches!(entry, Some(Some(_))) {
                    return Err(Problem::new(file, "is missing"));
                }
                return Ok(None);
            }
            Err(e) => return Err(Problem::new(file, format!("cannot be read: {e}"))),
        };
        match entry {
            Some(Some(entry)) => entry.check(&bytes).map_err(|r| Problem::new(file, r))?,
            Some(None) => {
                return Err(Problem::new(
                    file,
                    format!("is not recorded in {MANIFEST}, so it cannot be verified"),
                ))
            }
            None => {}
        }
        Ok(Some(bytes))
    };
    let state = read(STATE, true)?.unwrap_or_default();
    let model = read(MODEL, true)?.unwrap_or_default();
    let optimizer = read(OPTIMIZER, false)?;
    if let Some(m) = &manifest {
        for e in &m.files {
            if ![STATE, MODEL, OPTIMIZER].contains(&e.name.as_str()) {
                read(&e.name, true)?;
            }
        }
    }
    Ok(Files {
        state,
        model,
        optimizer,
        integrity: if manifest.is_some() {
            Integrity::Verified
        } else {
            Integrity::Unverified
        },
    })
}

/// Parses a safetensors file and checks every float in it is finite.
fn parse_tensors<'a>(
    file: &str,
    bytes: &'a [u8],
) -> std::result::Result<safetensors::SafeTensors<'a>, Problem> {
    let st = safetensors::SafeTensors::deserialize(bytes)
        .map_err(|e| Problem::new(file, format!("is not a readable safetensors file ({e})")))?;
    let mut names = st.names();
    names.sort();
    for name in names {
        let view = st
            .tensor(name)
            .map_err(|e| Problem::new(file, format!("has an unreadable tensor `{name}` ({e})")))?;
        if let Some(bad) = first_nonfinite_view(name, &view) {
            return Err(Problem::new(file, format!("is not finite: {bad}")));
        }
    }
    Ok(st)
}

fn parse_state(bytes: &[u8]) -> std::result::Result<State, Problem> {
    serde_json::from_slice(bytes).map_err(|e| Problem::new(STATE, format!("does not parse: {e}")))
}

/// `state.json` of a `step-NNNNNNN` directory must name that step: a hand-edited or misplaced
/// one would resume from the wrong step of the schedule (or overwrite another checkpoint).
fn check_step(dir: &Path, state: &State) -> std::result::Result<(), Problem> {
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
    match name.strip_prefix("step-").map(str::parse::<u64>) {
        Some(Ok(step)) if step != state.step => Err(Problem::new(
            STATE,
            format!(
                "says step {} but sits in `{name}` (step {step}): a state.json from another \
                 checkpoint, or edited",
                state.step
            ),
        )),
        _ => Ok(()),
    }
}

/// The tensors of a checkpoint's model file that the model its `state.json` describes has no
/// place for (a FIRE model's weights in a NoPE run): refused by name rather than ignored.
pub fn check_no_extra_tensors(
    dir: &Path,
    store: &ParamStore,
    model: &HashMap<String, Tensor>,
) -> Result<()> {
    let wanted = store.state_dict();
    let mut extra: Vec<&str> = model
        .keys()
        .filter(|k| !wanted.contains_key(*k))
        .map(String::as_str)
        .collect();
    if extra.is_empty() {
        return Ok(());
    }
    extra.sort_unstable();
    let shown = extra.len().min(5);
    Err(Problem::new(
        MODEL,
        format!(
            "holds {} tensor(s) the model in {STATE} has no place for: `{}`{} (weights of \
             another model?)",
            extra.len(),
            extra[..shown].join("`, `"),
            if extra.len() > shown { ", …" } else { "" }
        ),
    )
    .into_error(dir))
}

/// Checks one checkpoint directory without building tensors: every file against its manifest,
/// then that each parses and every weight is finite.
pub fn verify(dir: &Path) -> std::result::Result<Integrity, Problem> {
    let files = read_files(dir)?;
    check_step(dir, &parse_state(&files.state)?)?;
    parse_tensors(MODEL, &files.model)?;
    if let Some(o) = &files.optimizer {
        parse_tensors(OPTIMIZER, o)?;
    }
    Ok(files.integrity)
}

/// Loads the checkpoint at `path` (a run directory or a checkpoint directory), verified.
pub fn load(path: &Path, device: &Device) -> Result<Loaded> {
    let dir = resolve(path)?;
    load_dir(&dir, device).map_err(|p| p.into_error(&dir))
}

fn load_dir(dir: &Path, device: &Device) -> std::result::Result<Loaded, Problem> {
    let files = read_files(dir)?;
    let state = parse_state(&files.state)?;
    check_step(dir, &state)?;
    let tensors = |file: &str, bytes: &[u8]| {
        let st = parse_tensors(file, bytes)?;
        st.tensors()
            .into_iter()
            .map(|(name, view)| {
                let t = candle_core::safetensors::Load::load(&view, device).map_err(|e| {
                    Problem::new(
                        file,
                        format!("has a tensor `{name}` candle cannot load ({e})"),
                    )
                })?;
                Ok((name, t))
            })
            .collect::<std::result::Result<HashMap<_, _>, Problem>>()
    };
    let model = tensors(MODEL, &files.model)?;
    let optimizer = match &files.optimizer {
        Some(bytes) => tensors(OPTIMIZER, bytes)?,
        None => HashMap::new(),
    };
    Ok(Loaded {
        dir: dir.to_path_buf(),
        state,
        model,
        optimizer,
        integrity: files.integrity,
    })
}

/// Loads a checkpoint and builds its model for inference.
pub fn load_model(path: &Path, device: &Device) -> Result<(Model, Loaded)> {
    let loaded = load(path, device)?;
    let mut store = ParamStore::from_tensors(device, loaded.model.clone());
    let model = Model::new(&loaded.state.model, &mut store).map_err(|e| match e {
        // The weights verified but do not fit the configuration recorded beside them.
        Error::Checkpoint { path, reason } => Problem::new(
            MODEL,
            format!("does not fit the model in {STATE}: `{path}`: {reason}"),
        )
        .into_error(&loaded.dir),
        other => other,
    })?;
    check_no_extra_tensors(&loaded.dir, &store, &loaded.model)?;
    Ok((model, loaded))
}
