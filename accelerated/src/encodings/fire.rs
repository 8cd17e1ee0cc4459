//! FIRE: b(i, j) = f_θ( ψ(|i − j|) / (ψ(max(i, L)) + ε) ), ψ(x) = ln(|c|·x + 1), L = |m·L_init|.
//!
//! Parameter names are Appendix E's (`mlp.0.weight`, `mlp.0.bias`, `mlp.2.weight`, `mlp.2.bias`,
//! `c`, `init_L`, `L_multiplier`; a second hidden layer is `mlp.2` and the output `mlp.4`, as
//! `nn.Sequential(Linear, ReLU, Linear, ReLU, Linear)` numbers them), so a PyTorch state dict maps
//! 1:1. `init_L` is frozen; `L_multiplier` is trained unless the threshold is fixed.
//! spec: [fire.bias], [fire.params]

use candle_core::{Device, Tensor};
use fire_kernels::{DeviceTables, FireBias, FireParams, Linear, Mlp, PackedFire};

use crate::config::{Activation, FireConfig, FireInit, Threshold, Transform};
use crate::encodings::additive::{AdditiveModule, LayerBias};
use crate::encodings::grid::{scalar, values, Grid};
use crate::error::{ensure, Result};
use crate::params::{Init, ParamStore, Path};

/// One FIRE module: f_θ and the position transformation.
#[derive(Debug, Clone)]
pub struct Fire {
    /// `(weight [out, in], bias [out])` per layer of f_θ, hidden layers first.
    pub layers: Vec<(Tensor, Tensor)>,
    /// σ after every hidden layer.
    pub activation: Activation,
    /// An optional activation on the output.
    pub final_activation: Option<Activation>,
    /// c (scalar).
    pub c: Tensor,
    /// The frozen `init_L` (scalar).
    pub init_l: Tensor,
    /// `L_multiplier` (scalar).
    pub l_multiplier: Tensor,
    /// ε.
    pub eps: f64,
    /// ψ.
    pub transform: Transform,
    /// The threshold's role.
    pub threshold: Threshold,
}

/// The state-dict index of layer `n` of f_θ inside `nn.Sequential` (activations take slots).
fn sequential_index(n: usize) -> usize {
    2 * n
}

impl Fire {
    /// A module with Appendix E's initialisation (`nn.Linear` defaults for f_θ, c = 0.1,
    /// `init_L` = 512, `L_multiplier` = 1 unless configured otherwise). spec: [fire.defaults]
    pub fn new(cfg: &FireConfig, heads: usize, path: &mut Path<'_>) -> Result<Self> {
        FireParams {
            c: cfg.c,
            l_init: cfg.l_init,
            l_multiplier: cfg.l_multiplier,
            eps: cfg.eps,
            transform: cfg.transform,
            threshold: cfg.threshold,
        }
        .validate()?;
        let mut layers = Vec::with_capacity(cfg.depth + 1);
        if cfg.init == FireInit::KerpleLog {
            // Kerple's own initialisation, drawn in its order (r1 then r2), then the spare
            // neurons' rates.
            let r1 = path.uniform(heads, 0.0, 2.0);
            let r2 = path.uniform(heads, 0.0, 1.0);
            let spare = path.uniform(cfg.width.saturating_sub(heads), 0.0, 1.0);
            let [(w1, b1), (w2, b2)] = kerple_log_construction(&r1, &r2, &spare, cfg.l_init)?;
            for (n, (w, b)) in [(w1, b1), (w2, b2)].into_iter().enumerate() {
                let (out, inp) = (b.len(), w.len() / b.len());
                let mut p = path.pp(format!("mlp.{}", sequential_index(n)));
                let w = p.param("weight", &[out, inp], Init::Values(w))?;
                let b = p.param("bias", &[out], Init::Values(b))?;
                layers.push((w, b));
            }
        }
        let mut fan_in = 1;
        let constructed = !layers.is_empty();
        for n in (0..=cfg.depth).filter(|_| !constructed) {
            let fan_out = if n == cfg.depth { heads } else { cfg.width };
            let bound = 1.0 / (fan_in as f64).sqrt();
            let mut p = path.pp(format!("mlp.{}", sequential_index(n)));
            let w = p.param("weight", &[fan_out, fan_in], Init::Uniform(-bound, bound))?;
            let b = p.param("bias", &[fan_out], Init::Uniform(-bound, bound))?;
            layers.push((w, b));
            fan_in = fan_out;
        }
        let c = path.param("c", &[], Init::Const(cfg.c))?;
        let init_l = path.frozen("init_L", &[], Init::Const(cfg.l_init))?;
        let l_multiplier = match cfg.threshold {
            Threshold::Learnable => {
                path.param("L_multiplier", &[], Init::Const(cfg.l_multiplier))?
            }
            Threshold::Fixed | Threshold::Disabled => {
                path.frozen("L_multiplier", &[], Init::Const(cfg.l_multiplier))?
            }
        };
        Ok(Self {
            layers,
            activation: cfg.activation,
            final_activation: cfg.final_activation,
            c,
            init_l,
            l_multiplier,
            eps: cfg.eps,
            transform: cfg.transform,
            threshold: cfg.threshold,
        })
    }

    /// A module from explicit parameters, f_θ and the scalars as plain numbers (the
    /// conformance harness's entry point); the weights are rounded once to f32. The MLP's
    /// fields are public, so its shape is checked again here.
    pub fn from_params(mlp: &Mlp, params: &FireParams, device: &Device) -> Result<Self> {
        let mlp = Mlp::new(mlp.layers.clone(), mlp.activation, mlp.final_activation)?;
        params.validate()?;
        let f32s = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
        let layers = mlp
            .layers
            .iter()
            .map(|l| {
                Ok((
                    Tensor::from_vec(f32s(&l.weight), (l.outputs, l.inputs), device)?,
                    Tensor::from_vec(f32s(&l.bias), l.outputs, device)?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let scalar = |v: f64| Tensor::new(v as f32, device);
        Ok(Self {
            layers,
            activation: mlp.activation,
            final_activation: mlp.final_activation,
            c: scalar(params.c)?,
            init_l: scalar(params.l_init)?,
            l_multiplier: scalar(params.l_multiplier)?,
            eps: params.eps,
            transform: params.transform,
            threshold: params.threshold,
        })
    }

    /// H, the output width of f_θ.
    pub fn heads(&self) -> usize {
        self.layers.last().map_or(0, |(w, _)| w.dims()[0])
    }

    /// ψ applied elementwise. spec: [fire.psi]
    fn psi(&self, x: &Tensor) -> Result<Tensor> {
        Ok(match self.transform {
            Transform::Log => (x.broadcast_mul(&self.c.abs()?)? + 1.0)?.log()?,
            Transform::Identity => x.clone(),
        })
    }

    /// The threshold L = |m·L_init|. spec: [fire.threshold]
    pub fn threshold_value(&self) -> Result<Tensor> {
        Ok((&self.l_multiplier * &self.init_l)?.abs()?)
    }

    /// ψ(max(i, L)) + ε for each query position `[Q]`. spec: [fire.normalizer]
    pub fn normalizer(&self, query: &Tensor) -> Result<Tensor> {
        let i = match self.threshold {
            Threshold::Disabled => query.clone(),
            Threshold::Learnable | Threshold::Fixed => {
                query.broadcast_maximum(&self.threshold_value()?)?
            }
        };
        Ok((self.psi(&i)? + self.eps)?)
    }

    /// The MLP input x(i, j), `[Q, K]`. spec: [fire.input], [conv.future]
    pub fn input(&self, grid: &Grid) -> Result<Tensor> {
        let numerator = self.psi(&grid.distance)?;
        let denominator = self.normalizer(&grid.query)?.unsqueeze(1)?;
        Ok(numerator.broadcast_div(&denominator)?)
    }

    /// f_θ applied to every element of `x` (`[Q, K]`), giving `[H, Q, K]`. spec: [fire.mlp]
    pub fn mlp(&self, x: &Tensor) -> Result<Tensor> {
        let (q, k) = x.dims2()?;
        let mut h = x.reshape((q * k, 1))?;
        let last = self.layers.len() - 1;
        for (n, (w, b)) in self.layers.iter().enumerate() {
            h = h.matmul(&w.t()?)?.broadcast_add(b)?;
            let sigma = if n < last {
                Some(self.activation)
            } else {
                self.final_activation
            };
            if let Some(s) = sigma {
                h = activate(&h, s)?;
            }
        }
        let heads = h.dims()[1];
        Ok(h.t()?.reshape((heads, q, k))?)
    }

    /// The scalars' current values as the kernels take them.
    fn scalars(&self) -> Result<FireParams> {
        Ok(FireParams {
            c: scalar(&self.c)?,
            l_init: scalar(&self.init_l)?,
            l_multiplier: scalar(&self.l_multiplier)?,
            eps: self.eps,
            transform: self.transform,
            threshold: self.threshold,
        })
    }
}

/// Theorem 3.1's Kerple-log construction ([thm31.kerple-log]) as f_θ's two layers
/// `(weight [out·in] row-major, bias [out])`: with identity ψ and threshold `P` the MLP input is
/// `|i − j|/P` for every query `i ≤ P`; hidden neuron `h` (weight `r2_h·P`, bias 0) computes
/// `ln(1 + r2_h·|i − j|)` under σ = symlog, and output `h` takes `−r1_h` of it: Kerple-log's
/// bias. `spare` adds hidden neurons (weight `spare_k·P`) with output weight 0. The weights are
/// rounded once to f32 (`r2_h·P` exactly, P being a power of two).
pub fn kerple_log_construction(
    r1: &[f64],
    r2: &[f64],
    spare: &[f64],
    p: f64,
) -> Result<[(Vec<f32>, Vec<f32>); 2]> {
    let heads = r1.len();
    ensure(heads > 0 && r2.len() == heads, || {
        format!(
            "Kerple-log construction: {} r1 and {} r2 values",
            r1.len(),
            r2.len()
        )
    })?;
    let width = heads + spare.len();
    let hidden_w: Vec<f32> = r2.iter().chain(spare).map(|&r| (r * p) as f32).collect();
    let mut out_w = vec![0f32; heads * width];
    for (h, &r) in r1.iter().enumerate() {
        out_w[h * width + h] = -r as f32;
    }
    Ok([(hidden_w, vec![0.0; width]), (out_w, vec![0.0; heads])])
}

/// σ. spec: [fire.activation]
pub fn activate(x: &Tensor, a: Activation) -> Result<Tensor> {
    Ok(match a {
        // Not `x.relu()`: candle's backward takes relu'(0) = 1, while [grad.kinks] (and PyTorch
        // and JAX) take 0. Multiplying by the mask `x > 0`, which carries no gradient, gives the
        // same values and relu'(0) = 0. The conformance suite's `fire-grad/kinks/*` cases caught it.
        Activation::Relu => (x * x.gt(0.0)?.to_dtype(x.dtype())?)?,
        Activation::Gelu => x.gelu_erf()?,
        Activation::Identity => x.clone(),
        // sign(z)·ln(1 + |z|) as ln(1 + relu(z)) − ln(1 + relu(−z)), differentiable
        // everywhere (derivative 1/(1 + |z|)) from ops candle differentiates.
        Activation::Symlog => {
            let pos = activate(x, Activation::Relu)?;
            let neg = activate(&x.neg()?, Activation::Relu)?;
            ((pos + 1.0)?.log()? - (neg + 1.0)?.log()?)?
        }
    })
}

impl AdditiveModule for Fire {
    fn heads(&self) -> usize {
        Fire::heads(self)
    }

    fn device(&self) -> &Device {
        self.c.device()
    }

    /// b(i, j) for every pair of `grid`, `[H, Q, K]` (keys after the query included: they get
    /// the mirrored value through |i − j|). spec: [fire.bias], [conv.future]
    fn bias_tensor(&self, grid: &Grid) -> Result<Tensor> {
        self.mlp(&self.input(grid)?)
    }

    /// The module compiled for the kernels from its current weights: f_θ exactly piecewise
    /// linear (ReLU, identity) or evaluated directly (GeLU, symlog), ψ tabulated for distances below
    /// `capacity`.
    fn source(&self, capacity: usize) -> Result<Box<dyn DeviceTables>> {
        let layers = self
            .layers
            .iter()
            .enumerate()
            .map(|(n, (w, b))| {
                let (outputs, inputs) = w.dims2()?;
                let i = sequential_index(n);
                let w = named_finite(&format!("mlp.{i}.weight"), values(w)?)?;
                let b = named_finite(&format!("mlp.{i}.bias"), values(b)?)?;
                Ok(Linear::new(w, b, inputs, outputs)?)
            })
            .collect::<Result<Vec<_>>>()?;
        let mlp = Mlp::new(layers, self.activation, self.final_activation)?;
        Ok(Box::new(FireBias::new(mlp, self.scalars()?, capacity)?))
    }

    /// θ, `c` and `L_multiplier` packed into one differentiable tensor in [grad.layout]'s
    /// order (autograd splits the op's gradient back onto each variable; `init_L` enters as a
    /// constant). spec: [grad.layout]
    fn train_bias(&self, _n: usize) -> Result<LayerBias> {
        let mut parts = Vec::with_capacity(2 * self.layers.len() + 2);
        let mut shapes = Vec::with_capacity(self.layers.len());
        for (w, b) in &self.layers {
            shapes.push(w.dims2()?);
            parts.push(w.flatten_all()?);
            parts.push(b.flatten_all()?);
        }
        parts.push(self.c.reshape(1)?);
        parts.push(self.l_multiplier.reshape(1)?);
        let params = Tensor::cat(&parts, 0)?.to_dtype(candle_core::DType::F32)?;
        let layout = PackedFire {
            layers: shapes,
            activation: self.activation,
            final_activation: self.final_activation,
            scalars: self.scalars()?,
        };
        Ok(LayerBias::Fire { layout, params })
    }

    /// Appendix E's names: `mlp.{0,2,4}.{weight,bias}`, `c`, `init_L`, `L_multiplier`.
    fn state_dict(&self) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        for (n, (w, b)) in self.layers.iter().enumerate() {
            let i = sequential_index(n);
            out.push((format!("mlp.{i}.weight"), w.clone()));
            out.push((format!("mlp.{i}.bias"), b.clone()));
        }
        out.push(("c".into(), self.c.clone()));
        out.push(("init_L".into(), self.init_l.clone()));
        out.push(("L_multiplier".into(), self.l_multiplier.clone()));
        out
    }
}

/// `v` unless it holds a non-finite value: then the kernels' parameter error under the
/// state-dict name `name`, so the message names the weight rather than the kernels' own word
/// for f_θ's parameters.
fn named_finite(name: &str, v: Vec<f64>) -> Result<Vec<f64>> {
    match v.iter().position(|x| !x.is_finite()) {
        None => Ok(v),
        Some(i) => Err(fire_kernels::Error::Parameter {
            name: name.into(),
            reason: format!("must be finite, got {} at element {i}", v[i]),
        }
        .into()),
    }
}

/// Builds a standalone FIRE module with Appendix E's initialisation from `seed` (for tests and
/// `fire-lm bias` on fresh models).
pub fn standalone(cfg: &FireConfig, heads: usize, seed: u64, device: &Device) -> Result<Fire> {
    let mut store = ParamStore::fresh(device, seed);
    let mut root = store.root();
    Fire::new(cfg, heads, &mut root)
}
