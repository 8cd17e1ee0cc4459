//! `fire-conformance copy DIR`: the suite as plain files, with a minimal pytest loader, for
//! implementations that will never speak the protocol. spec: [vec.export]

use std::fs;
use std::path::Path;

use anyhow::Context;

use crate::vectors::{generate, load};

const LOADER: &str = include_str!("../adapters/export/test_fire_vectors.py");
const README: &str = include_str!("../adapters/export/README.md");

/// Copies the verified suite into `dir` with the loader example; returns the number of files.
pub fn copy(suite: &Path, dir: &Path) -> anyhow::Result<usize> {
    load::load(suite).context("the suite to export does not verify")?;
    let mut n = 0;
    for rel in generate::list(suite)? {
        let target = dir.join("vectors").join(&rel);
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::copy(suite.join(&rel), &target).with_context(|| format!("copying {rel}"))?;
        n += 1;
    }
    fs::write(dir.join("test_fire_vectors.py"), LOADER)?;
    fs::write(dir.join("README.md"), README)?;
    Ok(n + 2)
}
