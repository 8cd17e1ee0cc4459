//! The function approximator f_θ: R → R^H, a small MLP of one scalar input.

use nalgebra::{DMatrix, DVector};

use crate::error::{finite, Error, Result};
use crate::fire::activation::Activation;

/// One affine layer `z = W·x + b`, with PyTorch's layout `W: [out, in]`. spec: [fire.mlp]
#[derive(Debug, Clone, PartialEq)]
pub struct Linear {
    /// `[out, in]`, as `nn.Linear.weight`.
    pub weight: DMatrix<f64>,
    /// `[out]`.
    pub bias: DVector<f64>,
}

impl Linear {
    /// A layer from its weight and bias.
    pub fn new(weight: DMatrix<f64>, bias: DVector<f64>) -> Self {
        Self { weight, bias }
    }

    /// `W·x + b`. spec: [fire.mlp]
    pub fn apply(&self, x: &DVector<f64>) -> DVector<f64> {
        &self.weight * x + &self.bias
    }
}

/// f_θ: `depth` hidden layers with activation σ, then a linear output layer with one unit per
/// head, then an optional final activation. spec: [fire.mlp], [fire.ablation.depth],
/// [fire.ablation.activation], [fire.ablation.final-activation]
#[derive(Debug, Clone, PartialEq)]
pub struct Mlp {
    /// Hidden layers followed by the output layer (at least the output layer).
    pub layers: Vec<Linear>,
    /// σ, applied after every hidden layer.
    pub activation: Activation,
    /// Applied to the output layer when present (an Appendix B ablation; FIRE has none).
    pub final_activation: Option<Activation>,
}

impl Mlp {
    /// The number of hidden layers (0, 1 or 2 in the spec's family).
    pub fn depth(&self) -> usize {
        self.layers.len().saturating_sub(1)
    }

    /// The number of heads `H`: the output layer's width.
    pub fn heads(&self) -> usize {
        self.layers.last().map_or(0, |l| l.weight.nrows())
    }

    /// Checks shapes chain from 1 input to H outputs and every number is finite.
    /// spec: [fire.mlp], [num.errors]
    pub fn validate(&self) -> Result<()> {
        if self.layers.is_empty() {
            return Err(Error::Empty {
                what: "MLP layers".into(),
            });
        }
        let mut width = 1;
        for (n, layer) in self.layers.iter().enumerate() {
            let (rows, cols) = layer.weight.shape();
            if cols != width || rows == 0 {
                return Err(Error::Shape {
                    what: format!("MLP layer {n} weight"),
                    expected: format!("[>0, {width}]"),
                    got: format!("[{rows}, {cols}]"),
                });
            }
            if layer.bias.len() != rows {
                return Err(Error::Shape {
                    what: format!("MLP layer {n} bias"),
                    expected: format!("[{rows}]"),
                    got: format!("[{}]", layer.bias.len()),
                });
            }
            for v in layer.weight.iter().chain(layer.bias.iter()) {
                finite(&format!("MLP layer {n} parameter"), *v)?;
            }
            width = rows;
        }
        self.activation.validate()?;
        if let Some(a) = &self.final_activation {
            a.validate()?;
        }
        Ok(())
    }

    /// The pre-activations `z_l` and activations `a_l` of every layer for input `x`
    /// (`a_0 = [x]`); the last activation is the output f_θ(x). spec: [fire.mlp]
    pub fn trace(&self, x: f64) -> (Vec<DVector<f64>>, Vec<DVector<f64>>) {
        let mut pre = Vec::with_capacity(self.layers.len());
        let mut act = vec![DVector::from_element(1, x)];
        let last = self.layers.len() - 1;
        for (n, layer) in self.layers.iter().enumerate() {
            let z = layer.apply(&act[n]);
            let sigma = if n < last {
                Some(self.activation)
            } else {
                self.final_activation
            };
            let a = match sigma {
                Some(s) => z.map(|v| s.apply(v)),
                None => z.clone(),
            };
            pre.push(z);
            act.push(a);
        }
        (pre, act)
    }

    /// Fails when input `x` drives an activation outside its domain (log1p at `z ≤ −1`).
    /// spec: [fire.activation], [num.errors]
    pub fn check_domain(&self, x: f64) -> Result<()> {
        let (pre, _) = self.trace(x);
        let last = self.layers.len() - 1;
        for (n, z) in pre.iter().enumerate() {
            let sigma = if n < last {
                Some(self.activation)
            } else {
                self.final_activation
            };
            if let Some(s) = sigma {
                if let Some(bad) = z.iter().find(|&&v| !s.in_domain(v)) {
                    return Err(Error::Invalid {
                        what: format!("MLP layer {n} activation {}", s.name()),
                        reason: format!("pre-activation {bad} is outside its domain"),
                    });
                }
            }
        }
        Ok(())
    }

    /// f_θ(x) ∈ R^H. spec: [fire.mlp]
    pub fn eval(&self, x: f64) -> DVector<f64> {
        let (_, mut act) = self.trace(x);
        act.pop().unwrap_or_else(|| DVector::zeros(0))
    }

    /// The number of parameters, counted as in the PyTorch module.
    pub fn parameter_count(&self) -> usize {
        self.layers
            .iter()
            .map(|l| l.weight.len() + l.bias.len())
            .sum()
    }
}
