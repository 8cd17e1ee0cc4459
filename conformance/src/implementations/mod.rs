//! The implementations the harness knows how to drive.

#[cfg(feature = "accelerated")]
pub mod accelerated;
pub mod external;
#[cfg(feature = "accelerated")]
pub mod fast;
pub mod mutant;
pub mod reference;
pub mod variant;
