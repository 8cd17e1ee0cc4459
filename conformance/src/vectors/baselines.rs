//! Baseline encodings named in vector files, built from the reference.

use fire_reference::bias::AdditiveBias;
use fire_reference::{Error, Result};

use super::format::BaselineParams;

/// The reference encoding a baseline case names.
pub fn build(b: &BaselineParams) -> Result<Box<dyn AdditiveBias>> {
    Err(Error::Invalid {
        what: "baseline".into(),
        reason: format!("unknown baseline `{}`", b.name),
    })
}
