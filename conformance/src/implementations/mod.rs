//! The implementations the harness knows how to drive.

pub mod external;
pub mod reference;
pub mod variant;
