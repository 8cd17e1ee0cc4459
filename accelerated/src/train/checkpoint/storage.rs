//! Where a checkpoint's bytes go: the one seam between the checkpoint format and the disk.
//!
//! Every real run writes through [`Disk`]. The seam exists so a test can make one write fail
//! for real — e.g. by sending one file's bytes to `/dev/full`, which answers "no space left on
//! device" — and check that the save refuses cleanly, without needing a tiny filesystem (which
//! takes mount privileges) or file permissions (which do not stop root).

use std::io::Write;
use std::path::Path;

/// A place that can hold a checkpoint's files.
pub trait Storage: std::fmt::Debug + Send + Sync {
    /// Creates or replaces the file at `path` so it holds exactly `bytes`, durably (flushed to
    /// the device) by the time it returns.
    fn write(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()>;
}

/// The local filesystem: `create`, `write_all`, `sync_all`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Disk;

impl Storage for Disk {
    fn write(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        let mut file = std::fs::File::create(path)?;
        file.write_all(bytes)?;
        file.sync_all()
    }
}

/// Flushes a directory's entries (a rename inside it, a new file) to the device, so a power
/// loss after the save returns cannot undo the rename.
pub(super) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Writes `bytes` to `path` through `storage` atomically: a temporary file beside it, then a
/// rename. On failure the temporary file is removed and `path` is as it was; the error names
/// the path that failed.
pub(super) fn write_atomic(
    storage: &dyn Storage,
    path: &Path,
    bytes: &[u8],
) -> Result<(), (std::path::PathBuf, std::io::Error)> {
    let tmp = path.with_extension("tmp");
    if let Err(e) = storage.write(&tmp, bytes) {
        // Best effort: a leftover temporary file is ignored by every reader and replaced by
        // the next write.
        let _ = std::fs::remove_file(&tmp);
        return Err((tmp, e));
    }
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        (path.to_path_buf(), e)
    })
}
