//! Analytic gradients of the FIRE bias with respect to θ, c and m (L_init is frozen).
//!
//! Backpropagation written out by hand through the MLP trace and the transform; every kink
//! follows [grad.kinks]. Checked against central differences in the tests.

use nalgebra::{DMatrix, DVector};

use crate::bias::{AdditiveBias, Bias};
use crate::error::{Error, Result};
use crate::fire::transform::{dpsi_dc, dpsi_dx, psi, sign, thresholded};
use crate::fire::{Activation, Fire, Mlp, Threshold};
use crate::positions::{self, as_real, Position};

/// The gradient with respect to one layer: `(∂/∂W, ∂/∂b)`, shaped like the layer.
pub type LayerGradient = (DMatrix<f64>, DVector<f64>);

/// The gradient of a scalar with respect to every trainable FIRE parameter, in Appendix E's
/// order: `mlp.0.weight, mlp.0.bias, …, c, L_multiplier`. spec: [grad.layout]
#[derive(Debug, Clone, PartialEq)]
pub struct FireGradient {
    /// `(∂/∂W_l, ∂/∂b_l)` per layer, shaped like the layer.
    pub layers: Vec<LayerGradient>,
    /// ∂/∂c.
    pub c: f64,
    /// ∂/∂m (zero when the threshold is fixed or disabled).
    pub l_multiplier: f64,
}

impl FireGradient {
    /// A zero gradient shaped like `mlp`.
    pub fn zeros(mlp: &Mlp) -> Self {
        Self {
            layers: mlp
                .layers
                .iter()
                .map(|l| {
                    (
                        DMatrix::zeros(l.weight.nrows(), l.weight.ncols()),
                        DVector::zeros(l.bias.len()),
                    )
                })
                .collect(),
            c: 0.0,
            l_multiplier: 0.0,
        }
    }

    /// All entries flattened in [grad.layout] order (weights row-major, as PyTorch).
    pub fn to_flat(&self) -> Vec<f64> {
        let mut out = Vec::new();
        for (w, b) in &self.layers {
            for r in 0..w.nrows() {
                out.extend(w.row(r).iter().copied());
            }
            out.extend(b.iter().copied());
        }
        out.push(self.c);
        out.push(self.l_multiplier);
        out
    }

    fn add_scaled(&mut self, other: &FireGradient, s: f64) {
        for ((w, b), (ow, ob)) in self.layers.iter_mut().zip(&other.layers) {
            *w += ow * s;
            *b += ob * s;
        }
        self.c += other.c * s;
        self.l_multiplier += other.l_multiplier * s;
    }
}

/// The sub-gradients taken where a piece is not differentiable ([grad.kinks]): `max(i, L)` at a
/// tie `i = L` and `relu` at 0. The spec's are what `torch.maximum`/`jnp.maximum` and
/// `torch.relu`/`jax.nn.relu` return; code as faithful writes `torch.where(pos > L, pos, L)`
/// (all of it to `L`), `torch.maximum(h, 0)` (½) or `h.clamp(min=0)` (1), and a vector at a
/// kink accepts those too ([vec.case] `acceptable`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Subgradients {
    /// `∂max(i, L)/∂L` at a tie.
    pub max_tie: f64,
    /// `relu′(0)`, in the hidden and the final activation.
    pub relu_at_zero: f64,
}

impl Subgradients {
    /// The spec's: half the gradient to each side of a tie, `relu′(0) = 0`. spec: [grad.kinks]
    pub const SPEC: Self = Self {
        max_tie: 0.5,
        relu_at_zero: 0.0,
    };

    /// Every choice of 0, ½ and 1 at each kink other than [`Self::SPEC`]: the sub-gradients
    /// faithful code returns. spec: [grad.kinks]
    pub fn others() -> impl Iterator<Item = Self> {
        const CHOICES: [f64; 3] = [0.0, 0.5, 1.0];
        CHOICES
            .into_iter()
            .flat_map(|max_tie| {
                CHOICES.into_iter().map(move |relu_at_zero| Self {
                    max_tie,
                    relu_at_zero,
                })
            })
            .filter(|s| *s != Self::SPEC)
    }

    /// `σ′(z)`, with this choice at relu's kink.
    fn derivative(&self, sigma: Activation, z: f64) -> f64 {
        match sigma {
            Activation::Relu if z == 0.0 => self.relu_at_zero,
            _ => sigma.derivative(z),
        }
    }
}

/// Backpropagates cotangent `g ∈ R^H` through f_θ at input `x`: returns the parameter
/// gradients of `gᵀ f_θ(x)` and its derivative with respect to `x`. spec: [grad.theta]
pub fn backprop(mlp: &Mlp, x: f64, g: &DVector<f64>) -> (Vec<LayerGradient>, f64) {
    backprop_with(mlp, x, g, Subgradients::SPEC)
}

/// [`backprop`] with the sub-gradients `sub` at relu's kink. spec: [grad.theta], [grad.kinks]
pub fn backprop_with(
    mlp: &Mlp,
    x: f64,
    g: &DVector<f64>,
    sub: Subgradients,
) -> (Vec<LayerGradient>, f64) {
    let (pre, act) = mlp.trace(x);
    let last = mlp.layers.len() - 1;
    let mut delta = match mlp.final_activation {
        Some(s) => g.component_mul(&pre[last].map(|z| sub.derivative(s, z))),
        None => g.clone(),
    };
    let mut grads = vec![(DMatrix::zeros(0, 0), DVector::zeros(0)); mlp.layers.len()];
    for n in (0..=last).rev() {
        grads[n] = (&delta * act[n].transpose(), delta.clone());
        let back = mlp.layers[n].weight.transpose() * &delta;
        delta = if n > 0 {
            back.component_mul(&pre[n - 1].map(|z| sub.derivative(mlp.activation, z)))
        } else {
            back
        };
    }
    (grads, delta[0])
}

/// ∂x(i, j)/∂c and ∂x(i, j)/∂m by the quotient rule on ψ(|i−j|) / (ψ(max(i, L)) + ε).
/// spec: [grad.c], [grad.m], [grad.kinks]
pub fn input_partials(fire: &Fire, i: f64, j: f64) -> (f64, f64) {
    input_partials_with(fire, i, j, Subgradients::SPEC)
}

/// [`input_partials`] with the sub-gradient `sub.max_tie` at a tie `i = L`. spec: [grad.kinks]
pub fn input_partials_with(fire: &Fire, i: f64, j: f64, sub: Subgradients) -> (f64, f64) {
    let t = fire.transform;
    let c = fire.c;
    let d = (i - j).abs();
    let l = fire.threshold_value();
    let mx = thresholded(i, l);
    let num = psi(t, c, d);
    let den = psi(t, c, mx) + fire.eps;
    let dnum_dc = dpsi_dc(t, c, d);
    let dden_dc = dpsi_dc(t, c, mx);
    let dx_dc = (dnum_dc * den - num * dden_dc) / (den * den);
    let dx_dm = match (fire.threshold, l) {
        (Threshold::Learnable, Some(l)) => {
            // d max(i, L)/dL: 1 above, 0 below, the chosen sub-gradient at a tie (the
            // spec's ½: PyTorch/JAX `maximum`).
            let dmax_dl = if l > i {
                1.0
            } else if l == i {
                sub.max_tie
            } else {
                0.0
            };
            let dl_dm = sign(fire.l_multiplier * fire.l_init) * fire.l_init;
            let dden_dm = dpsi_dx(t, c, mx) * dmax_dl * dl_dm;
            -num * dden_dm / (den * den)
        }
        _ => 0.0,
    };
    (dx_dc, dx_dm)
}

/// The gradient of `gᵀ b(i, j)` for one pair and one cotangent `g ∈ R^H`. spec: [grad.theta],
/// [grad.c], [grad.m]
pub fn pair_gradient(fire: &Fire, i: f64, j: f64, g: &DVector<f64>) -> FireGradient {
    pair_gradient_with(fire, i, j, g, Subgradients::SPEC)
}

/// [`pair_gradient`] with the sub-gradients `sub` at the kinks. spec: [grad.kinks]
pub fn pair_gradient_with(
    fire: &Fire,
    i: f64,
    j: f64,
    g: &DVector<f64>,
    sub: Subgradients,
) -> FireGradient {
    let x = fire.input(i, j);
    let (layers, df_dx) = backprop_with(&fire.mlp, x, g, sub);
    let (dx_dc, dx_dm) = input_partials_with(fire, i, j, sub);
    FireGradient {
        layers,
        c: df_dx * dx_dc,
        l_multiplier: df_dx * dx_dm,
    }
}

/// ∂b_h(i, j)/∂(θ, c, m): the Jacobian row of one head at one pair. spec: [grad.theta]
pub fn jacobian(fire: &Fire, h: usize, i: Position, j: Position) -> Result<FireGradient> {
    fire.validate()?;
    if h >= fire.heads() {
        return Err(Error::OutOfRange {
            name: "head".into(),
            value: h as f64,
            requirement: format!("head < {}", fire.heads()),
        });
    }
    let mut e = DVector::zeros(fire.heads());
    e[h] = 1.0;
    Ok(pair_gradient(fire, as_real(i), as_real(j), &e))
}

/// The vector-Jacobian product `Σ_{h,q,k} G[h,q,k] · ∂b_h(i_q, j_k)/∂(θ, c, m)`: what
/// `(bias * G).sum().backward()` leaves in `.grad`. spec: [grad.vjp]
pub fn vjp(
    fire: &Fire,
    queries: &[Position],
    keys: &[Position],
    cotangent: &Bias,
) -> Result<FireGradient> {
    vjp_with(fire, queries, keys, cotangent, Subgradients::SPEC)
}

/// [`vjp`] with the sub-gradients `sub` at the kinks. spec: [grad.vjp], [grad.kinks]
pub fn vjp_with(
    fire: &Fire,
    queries: &[Position],
    keys: &[Position],
    cotangent: &Bias,
    sub: Subgradients,
) -> Result<FireGradient> {
    positions::validate("query positions", queries)?;
    positions::validate("key positions", keys)?;
    fire.validate()?;
    let want = [fire.heads(), queries.len(), keys.len()];
    if cotangent.shape() != want {
        return Err(Error::Shape {
            what: "cotangent".into(),
            expected: format!("{want:?}"),
            got: format!("{:?}", cotangent.shape()),
        });
    }
    let mut total = FireGradient::zeros(&fire.mlp);
    for (q, &i) in queries.iter().enumerate() {
        for (k, &j) in keys.iter().enumerate() {
            let g = DVector::from_fn(fire.heads(), |h, _| cotangent.get(h, q, k));
            total.add_scaled(
                &pair_gradient_with(fire, as_real(i), as_real(j), &g, sub),
                1.0,
            );
        }
    }
    Ok(total)
}
