//! # fire-accelerated
//!
//! A candle decoder-only language model with FIRE, FIRE-S and the paper's baseline encodings,
//! plus the fast FIRE kernels (`fast`).

pub mod fast;
