//! Positional encodings: a pluggable trait and one module per encoding, named as the papers
//! name them.
//!
//! An encoding either adds a per-head bias `[H, Q, K]` to the attention logits (FIRE, FIRE-S,
//! Alibi, Kerple, T5, Sandwich: [`additive`]), rotates queries and keys (RoPE, RoPE-PI), or does
//! nothing (NoPE). The model asks once per forward pass (per query chunk) for every layer's
//! bias, so a shared encoding (FIRE-S, T5, Alibi) computes its bias once and hands the same
//! tensor to every layer. Each attention backend ([`crate::attention`]) asks for the bias in its
//! own form: tensors, kernel sources, or differentiable training parameters.

pub mod additive;
pub mod alibi;
mod encoding;
pub mod fire;
mod grid;
pub mod kerple;
mod layers;
pub mod rope;
pub mod sandwich;
pub mod t5;

pub use additive::{AdditiveModule, KernelBias, LayerBias};
pub use encoding::{Nope, PositionEncoding};
pub use grid::Grid;
pub use layers::{Additive, Layers};

use crate::config::{EncodingConfig, ModelConfig};
use crate::error::Result;
use crate::params::Path;

/// Builds the encoding of `cfg`, registering its parameters under `root`.
pub fn build(cfg: &ModelConfig, root: &mut Path<'_>) -> Result<Box<dyn PositionEncoding>> {
    let heads = cfg.n_heads;
    let layers = cfg.n_layers;
    let name = cfg.encoding.name();
    Ok(match &cfg.encoding {
        EncodingConfig::Fire(f) => {
            let modules = (0..layers)
                .map(|l| fire::Fire::new(f, heads, &mut root.pp(format!("layers.{l}.attn.fire"))))
                .collect::<Result<Vec<_>>>()?;
            Box::new(Additive::per_layer(name, modules))
        }
        EncodingConfig::FireS(f) => Box::new(Additive::shared(
            name,
            fire::Fire::new(f, heads, &mut root.pp("fire"))?,
        )),
        EncodingConfig::Nope => Box::new(Nope),
        EncodingConfig::Rope { theta } => Box::new(rope::Rope::new(*theta, 1.0, cfg.head_dim())?),
        EncodingConfig::RopePi { theta, scale } => {
            Box::new(rope::Rope::new(*theta, *scale, cfg.head_dim())?)
        }
        EncodingConfig::Alibi => Box::new(Additive::shared(
            name,
            alibi::Alibi::new(heads, &root.device())?,
        )),
        EncodingConfig::KerpleLog | EncodingConfig::KerplePower => {
            let form = if matches!(cfg.encoding, EncodingConfig::KerpleLog) {
                kerple::Form::Log
            } else {
                kerple::Form::Power
            };
            let modules = (0..layers)
                .map(|l| {
                    kerple::Kerple::new(
                        form,
                        heads,
                        &mut root.pp(format!("layers.{l}.attn.kerple")),
                    )
                })
                .collect::<Result<Vec<_>>>()?;
            Box::new(Additive::per_layer(name, modules))
        }
        EncodingConfig::T5 {
            num_buckets,
            max_distance,
        } => Box::new(Additive::shared(
            name,
            t5::T5::new(
                *num_buckets,
                *max_distance,
                heads,
                cfg.init_std,
                &mut root.pp("rel_pos"),
            )?,
        )),
        EncodingConfig::Sandwich => Box::new(Additive::shared(
            name,
            sandwich::Sandwich::new(heads, cfg.head_dim(), &root.device())?,
        )),
    })
}
