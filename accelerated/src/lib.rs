//! # fire-accelerated
//!
//! A candle decoder-only language model with FIRE, FIRE-S and the paper's baseline encodings
//! (NoPE, RoPE, RoPE-PI, Alibi, Kerple, T5, Sandwich): its training, evaluation, sampling and
//! plots, on the fast kernels of `fire-kernels` (re-exported as [`kernels`]).
//!
//! Layers, bottom up (each module uses only those above it):
//! - [`error`], [`config`] (the model's serde configuration), [`timing`] (where a training
//!   step's time goes, by part), [`params`] (named parameters),
//!   [`ops`] (fused CPU ops with backward passes), [`nn`] (differentiable building blocks),
//!   [`optim`];
//! - [`encodings`]: one module per positional encoding, the additive ones sharing one
//!   implementation of every backend's form of the bias ([`encodings::additive`]);
//! - [`attention`]: the attention layer and its four backends (candle, fused evaluation, fused
//!   training, CUDA), chosen once per run;
//! - [`model`]: the decoder, one forward pass through the chosen backend;
//! - applications: [`train`] (with [`train::checkpoint`]), [`eval`], [`generate`],
//!   [`throughput`], with [`data`], [`tokenizer`] and [`plot`].
//!
//! In-process entry points for the conformance harness (all take 0-based `u64` positions and
//! return row-major `[H, Q, K]` f32): [`encodings::AdditiveModule::bias`] of
//! [`encodings::fire::Fire`], [`encodings::alibi::Alibi`], [`encodings::kerple::Kerple`],
//! [`encodings::t5::T5`] and [`encodings::sandwich::Sandwich`], and one head's causal attention
//! [`attention::causal_head`].

pub mod attention;
pub mod config;
pub mod data;
pub mod encodings;
pub mod error;
pub mod eval;
pub mod generate;
pub mod model;
pub mod nn;
pub mod ops;
pub mod optim;
pub mod params;
pub mod plot;
pub mod throughput;
pub mod timing;
pub mod tokenizer;
pub mod train;

pub use config::{EncodingConfig, FireConfig, ModelConfig};
pub use error::{Error, Result};
pub use fire_kernels as kernels;
pub use model::Model;
