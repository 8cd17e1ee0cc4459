//! Families of the baseline encodings and the Theorem 3.1 constructions.

use crate::vectors::format::VectorFile;

/// Every baseline and construction file.
pub fn all() -> anyhow::Result<Vec<(String, VectorFile)>> {
    Ok(vec![])
}
