//! The paper's baseline encodings (filled in by the baselines work).
