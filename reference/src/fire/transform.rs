//! The position transformation of FIRE: ψ, the threshold L, the normaliser and the MLP input.
//!
//! Each function is one equation of spec/fire.md and reads like it.

use crate::fire::Transform;

/// ψ_c(x) = ln(|c|·x + 1) for the log transform, ψ(x) = x without it. spec: [fire.psi],
/// [fire.ablation.no-log]
pub fn psi(transform: Transform, c: f64, x: f64) -> f64 {
    match transform {
        Transform::Log => (c.abs() * x).ln_1p(),
        Transform::Identity => x,
    }
}

/// ∂ψ_c(x)/∂c = sign(c)·x / (|c|·x + 1), with sign(0) = 0. spec: [grad.c], [grad.kinks]
pub fn dpsi_dc(transform: Transform, c: f64, x: f64) -> f64 {
    match transform {
        Transform::Log => sign(c) * x / (c.abs() * x + 1.0),
        Transform::Identity => 0.0,
    }
}

/// dψ_c(x)/dx = |c| / (|c|·x + 1) (1 for the identity). spec: [grad.m]
pub fn dpsi_dx(transform: Transform, c: f64, x: f64) -> f64 {
    match transform {
        Transform::Log => c.abs() / (c.abs() * x + 1.0),
        Transform::Identity => 1.0,
    }
}

/// L = |m · L_init|: the learnable multiplier times the frozen initial threshold.
/// spec: [fire.threshold]
pub fn threshold(l_multiplier: f64, l_init: f64) -> f64 {
    (l_multiplier * l_init).abs()
}

/// The normaliser ψ(max(i, L)) + ε of query position `i`. spec: [fire.normalizer]
pub fn normalizer(transform: Transform, c: f64, i: f64, l: Option<f64>, eps: f64) -> f64 {
    psi(transform, c, thresholded(i, l)) + eps
}

/// max(i, L), or `i` itself when the threshold is disabled. spec: [fire.normalizer],
/// [fire.ablation.no-threshold]
pub fn thresholded(i: f64, l: Option<f64>) -> f64 {
    match l {
        Some(l) => i.max(l),
        None => i,
    }
}

/// The MLP input x(i, j) = ψ(|i − j|) / (ψ(max(i, L)) + ε). spec: [fire.input], [conv.future]
pub fn input(transform: Transform, c: f64, i: f64, j: f64, l: Option<f64>, eps: f64) -> f64 {
    psi(transform, c, (i - j).abs()) / normalizer(transform, c, i, l, eps)
}

/// sign(v) with sign(0) = 0, the sub-gradient of |v| at 0 in PyTorch and JAX. spec: [grad.kinks]
pub fn sign(v: f64) -> f64 {
    if v > 0.0 {
        1.0
    } else if v < 0.0 {
        -1.0
    } else {
        0.0
    }
}
