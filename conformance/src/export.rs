//! `fire-conformance copy DIR`: the suite as plain files, with a minimal pytest loader, for
//! implementations that will never speak the protocol. spec: [vec.export]

use std::fs;
use std::path::Path;

use crate::error::{Error, Result};
use crate::vectors::load;

const LOADER: &str = include_str!("../adapters/export/test_fire_vectors.py");
const README: &str = include_str!("../adapters/export/README.md");

/// Copies the verified suite into `dir` with the loader example; returns the number of files.
pub fn copy(suite: &Path, dir: &Path) -> Result<usize> {
    load::load(suite)?;
    let mut n = 0;
    for rel in load::yaml_files(suite)? {
        let target = dir.join("vectors").join(&rel);
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).map_err(Error::io(parent))?;
        }
        fs::copy(suite.join(&rel), &target).map_err(Error::io(&target))?;
        n += 1;
    }
    for (name, text) in [("test_fire_vectors.py", LOADER), ("README.md", README)] {
        let path = dir.join(name);
        fs::write(&path, text).map_err(Error::io(path))?;
    }
    Ok(n + 2)
}
