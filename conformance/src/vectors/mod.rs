//! The golden vectors: format, writer, loader and manifest (the generator is [`crate::generate`]). spec: [vec.file]

pub mod baselines;
pub mod embedded;
pub mod flags;
pub mod format;
pub mod load;
pub mod manifest;
pub mod params;
pub mod yaml;
