//! Checkpoints: a directory `step-NNNNNNN/` holding `model.safetensors` (the state dict),
//! `optimizer.safetensors` (AdamW moments), `state.json` (step, RNG state, configs).
//!
//! Writes are atomic: the directory is written under a temporary name and renamed into place,
//! then the run's `latest` file (itself written to a temporary file and renamed) is pointed at
//! it. A run killed at any moment leaves either the previous checkpoint or the new one, never
//! a torn one.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use fire_vocabulary::SplitMix64;
use serde::{Deserialize, Serialize};

use super::config::TrainConfig;
use crate::config::ModelConfig;
use crate::error::{io, Error, Result};
use crate::model::Model;
use crate::params::ParamStore;

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
}

/// Writes `bytes` to `path` atomically (temporary file in the same directory, then rename).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
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
    let root = run.join("checkpoints");
    std::fs::create_dir_all(&root).map_err(io(&root))?;
    let name = format!("step-{:07}", state.step);
    let final_dir = root.join(&name);
    let tmp = root.join(format!(".tmp-{name}"));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(io(&tmp))?;
    }
    std::fs::create_dir_all(&tmp).map_err(io(&tmp))?;
    candle_core::safetensors::save(model, tmp.join("model.safetensors"))?;
    candle_core::safetensors::save(optimizer, tmp.join("optimizer.safetensors"))?;
    let json = serde_json::to_vec_pretty(state).map_err(|e| Error::Checkpoint {
        path: name.clone(),
        reason: e.to_string(),
    })?;
    std::fs::write(tmp.join("state.json"), json).map_err(io(&tmp))?;
    if final_dir.exists() {
        std::fs::remove_dir_all(&final_dir).map_err(io(&final_dir))?;
    }
    std::fs::rename(&tmp, &final_dir).map_err(io(&final_dir))?;
    write_atomic(&run.join("latest"), name.as_bytes())?;
    prune(&root, keep)?;
    Ok(final_dir)
}

fn prune(root: &Path, keep: usize) -> Result<()> {
    let mut names: Vec<String> = std::fs::read_dir(root)
        .map_err(io(root))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("step-"))
        .collect();
    names.sort();
    let excess = names.len().saturating_sub(keep.max(1));
    for n in &names[..excess] {
        let p = root.join(n);
        std::fs::remove_dir_all(&p).map_err(io(&p))?;
    }
    Ok(())
}

/// The newest checkpoint directory of a run (via `latest`), or `path` itself when it is a
/// checkpoint directory.
pub fn resolve(path: &Path) -> Result<PathBuf> {
    if path.join("state.json").is_file() {
        return Ok(path.to_path_buf());
    }
    let latest = path.join("latest");
    let name = std::fs::read_to_string(&latest).map_err(|_| Error::Checkpoint {
        path: path.display().to_string(),
        reason: "neither a checkpoint (no state.json) nor a run directory (no `latest`)".into(),
    })?;
    Ok(path.join("checkpoints").join(name.trim()))
}

/// Loads the checkpoint at `path` (a run directory or a checkpoint directory).
pub fn load(path: &Path, device: &Device) -> Result<Loaded> {
    let dir = resolve(path)?;
    let state_path = dir.join("state.json");
    let text = std::fs::read_to_string(&state_path).map_err(io(&state_path))?;
    let state: State = serde_json::from_str(&text).map_err(|e| Error::Parse {
        path: state_path.display().to_string(),
        reason: e.to_string(),
    })?;
    let model = candle_core::safetensors::load(dir.join("model.safetensors"), device)?;
    let opt_path = dir.join("optimizer.safetensors");
    let optimizer = if opt_path.is_file() {
        candle_core::safetensors::load(&opt_path, device)?
    } else {
        HashMap::new()
    };
    Ok(Loaded {
        dir,
        state,
        model,
        optimizer,
    })
}

/// Loads a checkpoint and builds its model for inference.
pub fn load_model(path: &Path, device: &Device) -> Result<(Model, Loaded)> {
    let loaded = load(path, device)?;
    let mut store = ParamStore::from_tensors(device, loaded.model.clone());
    let model = Model::new(&loaded.state.model, &mut store)?;
    Ok((model, loaded))
}
