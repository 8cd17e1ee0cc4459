//! # fire-accelerated
//!
//! A candle decoder-only language model with FIRE, FIRE-S and the paper's baseline encodings
//! (NoPE, RoPE, RoPE-PI, Alibi, Kerple, T5, Sandwich), its training, evaluation, sampling and
//! plots, plus the fast FIRE kernels (`fast`).
//!
//! In-process entry points for the conformance harness (all take 0-based `u64` positions and
//! return row-major `[H, Q, K]` f32): [`encodings::fire::Fire::bias`],
//! [`encodings::alibi::Alibi::bias`], [`encodings::kerple::Kerple::bias`],
//! [`encodings::t5::T5::bias`], [`encodings::sandwich::Sandwich::bias`], and one head's causal
//! attention [`attention::causal_head`].

pub mod attention;
pub mod checkpoint;
pub mod config;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod data;
pub mod encodings;
pub mod error;
pub mod eval;
pub mod fast;
pub mod fused;
pub mod fused_op;
pub mod generate;
pub mod model;
pub mod nn;
pub mod optim;
pub mod params;
pub mod plot;
pub mod rng;
pub mod throughput;
pub mod tokenizer;
pub mod train;

pub use config::{EncodingConfig, FireConfig, ModelConfig};
pub use error::{Error, Result};
pub use model::Model;
