//! Appendix E's defaults and a deterministic, seeded stand-in for PyTorch's initialisation.
//!
//! The reference has no RNG dependency: SplitMix64 (from the shared vocabulary) is enough to
//! draw reproducible weights, and its output is pinned by a snapshot test.

use nalgebra::{DMatrix, DVector};

use crate::fire::{Activation, Fire, Linear, Mlp, Threshold, Transform};

/// Appendix E's number of heads. spec: [fire.defaults]
pub const HEADS: usize = 12;
/// Appendix E's MLP width. spec: [fire.defaults]
pub const WIDTH: usize = 32;
/// The initial c. spec: [fire.defaults]
pub const C: f64 = 0.1;
/// The frozen initial threshold. spec: [fire.defaults]
pub const L_INIT: f64 = 512.0;
/// The initial multiplier. spec: [fire.defaults]
pub const L_MULTIPLIER: f64 = 1.0;
/// ε. spec: [fire.defaults]
pub const EPS: f64 = 1e-6;
/// The default depth: one hidden layer, as Appendix E's code. spec: [fire.defaults]
pub const DEPTH: usize = 1;

/// The shape of a FIRE module to initialise. spec: [fire.defaults]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    /// H.
    pub heads: usize,
    /// Hidden width.
    pub width: usize,
    /// Hidden layers: 0, 1 or 2.
    pub depth: usize,
}

impl Default for Shape {
    fn default() -> Self {
        Self {
            heads: HEADS,
            width: WIDTH,
            depth: DEPTH,
        }
    }
}

/// SplitMix64: a tiny, well-studied generator; enough for reproducible test parameters (shared
/// with the other implementations, so a seed means the same weights everywhere).
pub use fire_vocabulary::SplitMix64;

/// A layer drawn like `nn.Linear`'s default: U(−1/√fan_in, 1/√fan_in) for weight and bias.
pub fn linear(rng: &mut SplitMix64, fan_in: usize, fan_out: usize) -> Linear {
    let bound = 1.0 / (fan_in as f64).sqrt();
    let weight = DMatrix::from_fn(fan_out, fan_in, |_, _| rng.uniform(-bound, bound));
    let bias = DVector::from_fn(fan_out, |_, _| rng.uniform(-bound, bound));
    Linear::new(weight, bias)
}

/// A ReLU MLP of the given shape with seeded, PyTorch-like weights. spec: [fire.mlp]
pub fn mlp(shape: Shape, seed: u64) -> Mlp {
    let mut rng = SplitMix64::new(seed);
    let mut layers = Vec::with_capacity(shape.depth + 1);
    let mut fan_in = 1;
    for _ in 0..shape.depth {
        layers.push(linear(&mut rng, fan_in, shape.width));
        fan_in = shape.width;
    }
    layers.push(linear(&mut rng, fan_in, shape.heads));
    Mlp {
        layers,
        activation: Activation::Relu,
        final_activation: None,
    }
}

/// A FIRE module at Appendix E's default initialisation (c = 0.1, L_init = 512, m = 1,
/// ε = 10⁻⁶) with seeded MLP weights. spec: [fire.defaults]
pub fn appendix_e(shape: Shape, seed: u64) -> Fire {
    Fire {
        mlp: mlp(shape, seed),
        c: C,
        l_init: L_INIT,
        l_multiplier: L_MULTIPLIER,
        eps: EPS,
        transform: Transform::Log,
        threshold: Threshold::Learnable,
    }
}
