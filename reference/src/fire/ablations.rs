//! The Appendix B ablations as named, ready-made modules.
//!
//! Unlike the deviations of [`crate::variants`], these are legitimate members of the FIRE
//! family that the paper trains and compares; each is a switch of [`Fire`] or a depth of its MLP.

use crate::fire::init::{appendix_e, Shape};
use crate::fire::{Activation, Fire, Threshold, Transform};

/// A named Appendix B configuration. spec: [fire.ablation.no-log], [fire.ablation.no-threshold],
/// [fire.ablation.fixed-threshold], [fire.ablation.depth], [fire.ablation.activation],
/// [fire.ablation.final-activation]
#[derive(Debug, Clone, Copy)]
pub struct Ablation {
    /// The stable name used by vectors and reports.
    pub name: &'static str,
    /// The clause that defines it.
    pub clause: &'static str,
    /// A module with Appendix E's defaults (`shape.depth` is overridden where the ablation is a
    /// depth) and seeded weights, with the ablation applied.
    pub build: fn(Shape, u64) -> Fire,
}

/// Every ablation of Appendix B.
#[rustfmt::skip]
pub const ABLATIONS: &[Ablation] = &[
    Ablation { name: "no-log", clause: "fire.ablation.no-log", build: no_log },
    Ablation { name: "no-threshold", clause: "fire.ablation.no-threshold", build: no_threshold },
    Ablation { name: "fixed-threshold", clause: "fire.ablation.fixed-threshold", build: fixed_threshold },
    Ablation { name: "linear", clause: "fire.ablation.depth", build: linear },
    Ablation { name: "one-hidden-layer", clause: "fire.ablation.depth", build: one_hidden },
    Ablation { name: "two-hidden-layers", clause: "fire.ablation.depth", build: two_hidden },
    Ablation { name: "gelu", clause: "fire.ablation.activation", build: gelu },
    Ablation { name: "final-relu", clause: "fire.ablation.final-activation", build: final_relu },
];

fn no_log(shape: Shape, seed: u64) -> Fire {
    Fire {
        transform: Transform::Identity,
        ..appendix_e(shape, seed)
    }
}

fn no_threshold(shape: Shape, seed: u64) -> Fire {
    Fire {
        threshold: Threshold::Disabled,
        ..appendix_e(shape, seed)
    }
}

fn fixed_threshold(shape: Shape, seed: u64) -> Fire {
    Fire {
        threshold: Threshold::Fixed,
        ..appendix_e(shape, seed)
    }
}

fn with_depth(shape: Shape, seed: u64, depth: usize) -> Fire {
    appendix_e(Shape { depth, ..shape }, seed)
}

fn linear(shape: Shape, seed: u64) -> Fire {
    with_depth(shape, seed, 0)
}

fn one_hidden(shape: Shape, seed: u64) -> Fire {
    with_depth(shape, seed, 1)
}

fn two_hidden(shape: Shape, seed: u64) -> Fire {
    with_depth(shape, seed, 2)
}

fn gelu(shape: Shape, seed: u64) -> Fire {
    let mut f = appendix_e(shape, seed);
    f.mlp.activation = Activation::Gelu;
    f
}

fn final_relu(shape: Shape, seed: u64) -> Fire {
    let mut f = appendix_e(shape, seed);
    f.mlp.final_activation = Some(Activation::Relu);
    f
}
