//! The paper's baseline encodings: T5 RPE (simplified, general buckets, official bucketing),
//! Alibi, Kerple (log and power), Sandwich (paper and centred forms), RoPE / RoPE-PI and NoPE.
//!
//! Every additive encoding implements [`crate::bias::AdditiveBias`] with one parameter set per
//! head; RoPE is not additive and is a score function instead. Each function reads like one
//! equation of `spec/baselines.md` and cites its clause.

pub mod alibi;
pub mod kerple;
pub mod nope;
pub mod rope;
pub mod sandwich;
pub mod t5;
pub mod t5_official;

pub use alibi::Alibi;
pub use kerple::{KerpleLog, KerplePower};
pub use nope::Nope;
pub use rope::{Pairing, Rope};
pub use sandwich::{SandwichCentred, SandwichPaper};
pub use t5::{T5Buckets, T5Simplified};
pub use t5_official::{OfficialBucketing, T5Official};

use crate::error::{checked, Error, Result};

/// Checks a per-head parameter list: at least one head, and exactly `heads` entries when
/// `heads` is given. spec: [baselines.heads]
pub(crate) fn per_head(what: &str, values: usize, heads: Option<usize>) -> Result<()> {
    if values == 0 {
        return Err(Error::Empty {
            what: what.to_owned(),
        });
    }
    match heads {
        Some(h) if h != values => Err(Error::Shape {
            what: what.to_owned(),
            expected: format!("{h} (one per head)"),
            got: values.to_string(),
        }),
        _ => Ok(()),
    }
}

/// Checks that every entry of `values` is finite and strictly positive. spec: [baselines.heads]
pub(crate) fn all_positive(name: &str, values: &[f64]) -> Result<()> {
    for (h, &v) in values.iter().enumerate() {
        checked(&format!("{name}[{h}]"), v, v > 0.0, "> 0")?;
    }
    Ok(())
}
