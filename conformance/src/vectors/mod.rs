//! The golden vectors: format, writer, loader, manifest and generator. spec: [vec.file]

pub mod baselines;
pub mod embedded;
pub mod flags;
pub mod format;
pub mod generate;
pub mod load;
pub mod manifest;
pub mod params;
pub mod yaml;
