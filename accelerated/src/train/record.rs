//! The replay record of a run (`fire-lm train --record DIR`): the initial weights and every
//! step's batch, so that an independent implementation (accelerated/benches/torch_twin.py) can
//! replay the run step for step without re-implementing the corpus walk, the split or the
//! sampler, and stays valid when the sampler changes.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};

use candle_core::Tensor;

use crate::error::{io, Error, Result};

/// Appends every step's batch to `batches.u32`: for each step, the inputs then the targets,
/// each `[batch, seq_len]` row-major, as little-endian u32 token ids. Step `s` (0-based) starts
/// at byte `s · 2 · batch · seq_len · 4`, so a resumed run truncates to its start and goes on.
#[derive(Debug)]
pub struct BatchRecorder {
    file: std::fs::File,
    path: PathBuf,
}

impl BatchRecorder {
    /// Opens (creating) `dir/batches.u32` positioned after `start` steps of `tokens_per_step`
    /// tokens each (inputs and targets together), and writes `initial` (the state dict before
    /// the first step, `None` when resuming) as `dir/init.safetensors`.
    pub fn open(
        dir: &Path,
        start: u64,
        tokens_per_step: usize,
        initial: Option<BTreeMap<String, Tensor>>,
    ) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        if let Some(state) = initial {
            let state: HashMap<String, Tensor> = state.into_iter().collect();
            candle_core::safetensors::save(&state, dir.join("init.safetensors"))?;
        }
        let path = dir.join("batches.u32");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io(&path))?;
        let keep = start * tokens_per_step as u64 * 4;
        let have = file.metadata().map_err(io(&path))?.len();
        if have < keep {
            return Err(Error::Data(format!(
                "{} holds {have} bytes, fewer than the {keep} of the {start} steps already run",
                path.display()
            )));
        }
        file.set_len(keep).map_err(io(&path))?;
        Ok(Self { file, path })
    }

    /// Appends one step's inputs and targets.
    pub fn write(&mut self, x: &Tensor, y: &Tensor) -> Result<()> {
        let mut bytes = Vec::with_capacity(2 * x.elem_count() * 4);
        for t in [x, y] {
            for v in t.flatten_all()?.to_vec1::<u32>()? {
                bytes.extend_from_slice(&v.to_le_bytes());
            }
        }
        self.file.write_all(&bytes).map_err(io(&self.path))
    }
}
