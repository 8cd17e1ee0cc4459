//! The implementations the harness knows how to drive.

#[cfg(feature = "accelerated")]
pub mod accelerated;
pub mod external;
pub mod reference;
pub mod variant;
