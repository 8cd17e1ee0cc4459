//! Analytic gradients of the FIRE bias with respect to θ, c and m (L_init is frozen).
//!
//! Backpropagation written out by hand through the MLP trace and the transform; every kink
//! follows [grad.kinks]. Checked against central differences in the tests.

use nalgebra::{DMatrix, DVector};

use crate::bias::{AdditiveBias, Bias};
use crate::error::{Error, Result};
use crate::fire::transform::{dpsi_dc, dpsi_dx, psi, sign, thresholded};
use crate::fire::{Fire, Mlp, Threshold};
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

/// Backpropagates cotangent `g ∈ R^H` through f_θ at input `x`: returns the parameter
/// gradients of `gᵀ f_θ(x)` and its derivative with respect to `x`. spec: [grad.theta]
pub fn backprop(mlp: &Mlp, x: f64, g: &DVector<f64>) -> (Vec<LayerGradient>, f64) {
    let (pre, act) = mlp.trace(x);
    let last = mlp.layers.len() - 1;
    let mut delta = match mlp.final_activation {
        Some(s) => g.component_mul(&pre[last].map(|z| s.derivative(z))),
        None => g.clone(),
    };
    let mut grads = vec![(DMatrix::zeros(0, 0), DVector::zeros(0)); mlp.layers.len()];
    for n in (0..=last).rev() {
        grads[n] = (&delta * act[n].transpose(), delta.clone());
        let back = mlp.layers[n].weight.transpose() * &delta;
        delta = if n > 0 {
            back.component_mul(&pre[n - 1].map(|z| mlp.activation.derivative(z)))
        } else {
            back
        };
    }
    (grads, delta[0])
}

/// ∂x(i, j)/∂c and ∂x(i, j)/∂m by the quotient rule on ψ(|i−j|) / (ψ(max(i, L)) + ε).
/// spec: [grad.c], [grad.m], [grad.kinks]
pub fn input_partials(fire: &Fire, i: f64, j: f64) -> (f64, f64) {
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
            // d max(i, L)/dL: 1 above, 0 below, 1/2 at a tie (PyTorch/JAX `maximum`).
            let dmax_dl = if l > i {
                1.0
            } else if l == i {
                0.5
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
    let x = fire.input(i, j);
    let (layers, df_dx) = backprop(&fire.mlp, x, g);
    let (dx_dc, dx_dm) = input_partials(fire, i, j);
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
            total.add_scaled(&pair_gradient(fire, as_real(i), as_real(j), &g), 1.0);
        }
    }
    Ok(total)
}
