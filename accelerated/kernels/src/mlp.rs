//! f_θ as plain numbers: the MLP of one scalar input that FIRE evaluates, kept free of any model
//! type so the kernels can be wired to whatever holds the trained weights.
//!
//! Layout follows PyTorch's `nn.Linear`: `weight` is `[out, in]` row-major, `bias` is `[out]`.
//! spec: [fire.mlp]

use fire_vocabulary::Activation;

use crate::error::{finite, shape, Error, Result};

/// The kernels' own maths of the activations σ between layers, in f64: the word is shared
/// ([`Activation`]), the arithmetic is this crate's. Only the piecewise-linear activations
/// compile exactly (see [`crate::compile`]); GeLU is evaluated directly. spec: [fire.activation]
pub trait Sigma: Copy {
    /// σ(z).
    fn apply(self, z: f64) -> f64;
    /// σ'(z), with relu'(0) = 0 ([grad.kinks]).
    fn derivative(self, z: f64) -> f64;
}

impl Sigma for Activation {
    fn apply(self, z: f64) -> f64 {
        match self {
            Activation::Relu => z.max(0.0),
            Activation::Identity => z,
            Activation::Gelu => 0.5 * z * (1.0 + erf(z / std::f64::consts::SQRT_2)),
            Activation::Symlog => z.signum() * z.abs().ln_1p(),
        }
    }

    fn derivative(self, z: f64) -> f64 {
        match self {
            Activation::Relu => {
                if z > 0.0 {
                    1.0
                } else {
                    0.0
                }
            }
            Activation::Identity => 1.0,
            Activation::Gelu => {
                let cdf = 0.5 * (1.0 + erf(z / std::f64::consts::SQRT_2));
                let pdf = (-0.5 * z * z).exp() / (2.0 * std::f64::consts::PI).sqrt();
                cdf + z * pdf
            }
            Activation::Symlog => 1.0 / (1.0 + z.abs()),
        }
    }
}

/// erf by Abramowitz & Stegun 7.1.26: absolute error below 1.5e-7, inside f32 tolerance. Only
/// the GeLU fallback uses it.
fn erf(x: f64) -> f64 {
    let sign = if x < 0.0 { -1.0 } else { 1.0 };
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    sign * (1.0 - poly * (-a * a).exp())
}

/// One affine layer `z = W·x + b`, `W: [out, in]` row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Linear {
    /// `[out, in]`, row-major, as `nn.Linear.weight`.
    pub weight: Vec<f64>,
    /// `[out]`.
    pub bias: Vec<f64>,
    /// Input width.
    pub inputs: usize,
    /// Output width.
    pub outputs: usize,
}

impl Linear {
    /// A layer from its row-major weight `[outputs, inputs]` and bias `[outputs]`.
    pub fn new(weight: Vec<f64>, bias: Vec<f64>, inputs: usize, outputs: usize) -> Result<Self> {
        if weight.len() != inputs * outputs {
            return Err(shape(
                "linear weight",
                format!("[{outputs}, {inputs}]"),
                weight.len(),
            ));
        }
        if bias.len() != outputs {
            return Err(shape("linear bias", outputs, bias.len()));
        }
        for v in weight.iter().chain(&bias) {
            finite("MLP parameter", *v)?;
        }
        Ok(Self {
            weight,
            bias,
            inputs,
            outputs,
        })
    }

    /// Row `o` of the weight.
    pub fn row(&self, o: usize) -> &[f64] {
        &self.weight[o * self.inputs..(o + 1) * self.inputs]
    }
}

/// f_θ: R → R^H. Hidden layers with σ, then the output layer (one unit per head), then an
/// optional final activation. spec: [fire.mlp]
#[derive(Debug, Clone, PartialEq)]
pub struct Mlp {
    /// Hidden layers followed by the output layer.
    pub layers: Vec<Linear>,
    /// σ after every hidden layer.
    pub activation: Activation,
    /// Applied to the output (FIRE has none).
    pub final_activation: Option<Activation>,
}

impl Mlp {
    /// Checks that the layers chain from one input to `H` outputs.
    pub fn new(
        layers: Vec<Linear>,
        activation: Activation,
        final_activation: Option<Activation>,
    ) -> Result<Self> {
        if layers.is_empty() {
            return Err(Error::Empty {
                what: "MLP layers".into(),
            });
        }
        let mut width = 1;
        for (n, l) in layers.iter().enumerate() {
            if l.inputs != width || l.outputs == 0 {
                return Err(shape(
                    &format!("MLP layer {n}"),
                    format!("[>0, {width}]"),
                    format!("[{}, {}]", l.outputs, l.inputs),
                ));
            }
            width = l.outputs;
        }
        Ok(Self {
            layers,
            activation,
            final_activation,
        })
    }

    /// `H`, the output width.
    pub fn heads(&self) -> usize {
        self.layers.last().map_or(0, |l| l.outputs)
    }

    /// True when every activation is piecewise linear, so [`crate::compile`] is exact.
    pub fn is_piecewise_linear(&self) -> bool {
        self.activation.is_piecewise_linear()
            && self
                .final_activation
                .is_none_or(Activation::is_piecewise_linear)
    }

    /// f_θ(x) into `out` (`H` values), literally, layer by layer, in f64. `scratch` holds two
    /// buffers reused between calls.
    pub fn eval_into(&self, x: f64, scratch: &mut [Vec<f64>; 2], out: &mut [f64]) {
        let [a, b] = scratch;
        a.clear();
        a.push(x);
        let last = self.layers.len() - 1;
        for (n, layer) in self.layers.iter().enumerate() {
            b.clear();
            let sigma = if n < last {
                Some(self.activation)
            } else {
                self.final_activation
            };
            for o in 0..layer.outputs {
                let z = layer
                    .row(o)
                    .iter()
                    .zip(a.iter())
                    .fold(layer.bias[o], |s, (w, v)| s + w * v);
                b.push(sigma.map_or(z, |s| s.apply(z)));
            }
            std::mem::swap(a, b);
        }
        out.copy_from_slice(a);
    }

    /// f_θ(x) ∈ R^H, allocating; for tests and one-off use.
    pub fn eval(&self, x: f64) -> Vec<f64> {
        let mut out = vec![0.0; self.heads()];
        self.eval_into(x, &mut [Vec::new(), Vec::new()], &mut out);
        out
    }
}

impl Mlp {
    /// Head `h` of f_θ(x) only: the hidden layers in full, then one row of the output layer.
    /// The direct (GeLU) fallback's per-entry evaluation.
    pub fn eval_head(&self, x: f64, h: usize, scratch: &mut [Vec<f64>; 2]) -> f64 {
        let [a, b] = scratch;
        a.clear();
        a.push(x);
        let last = self.layers.len() - 1;
        for layer in &self.layers[..last] {
            b.clear();
            for o in 0..layer.outputs {
                let z = layer
                    .row(o)
                    .iter()
                    .zip(a.iter())
                    .fold(layer.bias[o], |s, (w, v)| s + w * v);
                b.push(self.activation.apply(z));
            }
            std::mem::swap(a, b);
        }
        let out = &self.layers[last];
        let z = out
            .row(h)
            .iter()
            .zip(a.iter())
            .fold(out.bias[h], |s, (w, v)| s + w * v);
        self.final_activation.map_or(z, |s| s.apply(z))
    }
}

/// Backpropagation through f_θ, for the fused kernel's backward pass
/// ([`crate::backward`]). spec: [grad.theta], [grad.kinks]
impl Mlp {
    /// The number of θ parameters, laid out per layer as the weight (`[out, in]` row-major)
    /// then the bias, layers in order: [grad.layout]'s order.
    pub fn param_count(&self) -> usize {
        self.layers.iter().map(|l| l.outputs * (l.inputs + 1)).sum()
    }

    /// The activation after layer `n`, if any.
    fn sigma(&self, n: usize) -> Option<Activation> {
        if n + 1 < self.layers.len() {
            Some(self.activation)
        } else {
            self.final_activation
        }
    }

    /// Which ReLU units are on (`z > 0`) at `x`, per layer (all `true` where the layer has no
    /// ReLU). Inside one segment of the compiled form this pattern is constant.
    pub fn pattern(&self, x: f64) -> Vec<Vec<bool>> {
        let mut a = vec![x];
        let mut out = Vec::with_capacity(self.layers.len());
        for (n, layer) in self.layers.iter().enumerate() {
            let sigma = self.sigma(n);
            let z: Vec<f64> = (0..layer.outputs)
                .map(|o| dot(layer.row(o), &a) + layer.bias[o])
                .collect();
            out.push(
                z.iter()
                    .map(|&z| sigma != Some(Activation::Relu) || z > 0.0)
                    .collect(),
            );
            a = z.iter().map(|&z| sigma.map_or(z, |s| s.apply(z))).collect();
        }
        out
    }

    /// Adds `Σ_h g_h·∂f_h/∂θ` at `x` to `grads` ([`Self::param_count`] values, packed as
    /// there) and returns `Σ_h g_h·∂f_h/∂x`.
    ///
    /// With `pattern`, every ReLU unit is on or off as the pattern says instead of by the sign of
    /// its input: f_θ is then the one affine piece of a segment, extended to all `x`, and the
    /// gradient is affine in `x`, which is what lets the backward pass sum a whole segment's
    /// pairs into two numbers per head. Without, ReLU's derivative at 0 is 0 ([grad.kinks]).
    pub fn vjp(&self, x: f64, g: &[f64], pattern: Option<&[Vec<bool>]>, grads: &mut [f64]) -> f64 {
        // Forward, keeping every layer's input a_{n−1} and the derivative σ'(z_n).
        let mut inputs: Vec<Vec<f64>> = Vec::with_capacity(self.layers.len());
        let mut slopes: Vec<Vec<f64>> = Vec::with_capacity(self.layers.len());
        let mut a = vec![x];
        for (n, layer) in self.layers.iter().enumerate() {
            let sigma = self.sigma(n);
            let mut next = Vec::with_capacity(layer.outputs);
            let mut slope = Vec::with_capacity(layer.outputs);
            for o in 0..layer.outputs {
                let z = dot(layer.row(o), &a) + layer.bias[o];
                let (value, d) = match (sigma, pattern) {
                    (Some(Activation::Relu), Some(p)) => {
                        let on = p[n][o];
                        (if on { z } else { 0.0 }, if on { 1.0 } else { 0.0 })
                    }
                    (Some(s), _) => (s.apply(z), s.derivative(z)),
                    (None, _) => (z, 1.0),
                };
                next.push(value);
                slope.push(d);
            }
            inputs.push(std::mem::replace(&mut a, next));
            slopes.push(slope);
        }
        // Backward.
        let mut offsets = Vec::with_capacity(self.layers.len());
        let mut off = 0;
        for l in &self.layers {
            offsets.push(off);
            off += l.outputs * (l.inputs + 1);
        }
        let mut delta: Vec<f64> = g
            .iter()
            .zip(&slopes[self.layers.len() - 1])
            .map(|(g, s)| g * s)
            .collect();
        for n in (0..self.layers.len()).rev() {
            let layer = &self.layers[n];
            let (w_off, b_off) = (offsets[n], offsets[n] + layer.outputs * layer.inputs);
            for (o, &dlt) in delta.iter().enumerate() {
                if dlt == 0.0 {
                    continue;
                }
                for (i, &a) in inputs[n].iter().enumerate() {
                    grads[w_off + o * layer.inputs + i] += dlt * a;
                }
                grads[b_off + o] += dlt;
            }
            let back: Vec<f64> = (0..layer.inputs)
                .map(|i| {
                    delta
                        .iter()
                        .enumerate()
                        .map(|(o, d)| d * layer.weight[o * layer.inputs + i])
                        .sum()
                })
                .collect();
            if n == 0 {
                return back[0];
            }
            delta = back
                .iter()
                .zip(&slopes[n - 1])
                .map(|(b, s)| b * s)
                .collect();
        }
        0.0
    }
}

fn dot(w: &[f64], a: &[f64]) -> f64 {
    w.iter().zip(a).map(|(w, a)| w * a).sum()
}
