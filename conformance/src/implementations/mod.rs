//! The implementations the harness knows how to drive.

#[cfg(feature = "accelerated")]
pub mod accelerated;
pub mod external;
#[cfg(feature = "fast")]
mod f32_adapter;
#[cfg(feature = "fast")]
pub mod fast;
pub mod mutant;
pub mod reference;
pub mod variant;
