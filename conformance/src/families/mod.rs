//! The vector families, each generated from the reference. spec: [vec.families]

pub mod attention;
pub mod baselines;
pub mod common;
pub mod edge;
pub mod fire;
pub mod grad;
pub mod invalid;
pub mod theorem;

use crate::vectors::format::VectorFile;

/// Every file of the suite, as `(relative path, file)`, in a fixed order. spec: [vec.generation]
pub fn all() -> crate::error::Result<Vec<(String, VectorFile)>> {
    let mut files = Vec::new();
    files.extend(fire::fire()?);
    files.extend(fire::fire_s()?);
    files.extend(grad::fire_grad()?);
    files.extend(fire::ablations()?);
    files.extend(edge::edge()?);
    files.extend(attention::attention()?);
    files.extend(invalid::invalid()?);
    files.extend(baselines::all()?);
    files.push(theorem::theorem()?);
    files.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(files)
}
