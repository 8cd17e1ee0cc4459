//! # fire-reference
//!
//! The literal, f64 reading of `spec/`: FIRE ("Functional Interpolation for Relative Positions
//! Improves Long Context Transformers", Li et al., arXiv:2310.04418), its gradients, its named
//! deviations, the paper's baseline encodings and the Theorem 3.1 constructions.
//!
//! Every public function cites the clause it implements (`spec: [id]`); a test fails when a
//! clause has no citing code or a citation names a missing clause. This crate is the only
//! generator of the golden vectors; it favours obviousness over speed: f64 throughout, one pair
//! at a time, in the order the equations are written. spec: [num.reference]

pub mod attention;
pub mod baselines;
pub mod bias;
pub mod error;
pub mod fire;
pub mod positions;
pub mod theorem_3_1;
pub mod variants;

pub use bias::{evaluate, AdditiveBias, Bias, Pair};
pub use error::{Error, Result};
pub use fire::Fire;
pub use positions::Position;
