//! FIRE: b(i, j) = f_θ( ψ(|i − j|) / (ψ(max(i, L)) + ε) ), ψ(x) = ln(|c|·x + 1), L = |m·L_init|.
//!
//! Parameter names are Appendix E's (`mlp.0.weight`, `mlp.0.bias`, `mlp.2.weight`, `mlp.2.bias`,
//! `c`, `init_L`, `L_multiplier`; a second hidden layer is `mlp.2` and the output `mlp.4`, as
//! `nn.Sequential(Linear, ReLU, Linear, ReLU, Linear)` numbers them), so a PyTorch state dict maps
//! 1:1. `init_L` is frozen; `L_multiplier` is trained unless the threshold is fixed.
//! spec: [fire.bias], [fire.params]

use candle_core::{DType, Device, Tensor};

use crate::config::{Activation, FireConfig, Threshold, Transform};
use crate::encodings::{Grid, PositionEncoding};
use crate::error::{ensure, Error, Result};
use crate::fast;
use crate::fused::{scalar, FusedEncoding};
use crate::fused_op::{FireSpec, LayerBias};
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

/// Explicit FIRE parameters, for building a module outside a model (conformance, tests).
#[derive(Debug, Clone, PartialEq)]
pub struct FireParams {
    /// Per layer of f_θ: `(weight [out·in] row-major, out, in, bias [out])`.
    pub layers: Vec<(Vec<f32>, usize, usize, Vec<f32>)>,
    /// σ of the hidden layers.
    pub activation: Activation,
    /// Optional output activation.
    pub final_activation: Option<Activation>,
    /// c.
    pub c: f64,
    /// `init_L`.
    pub l_init: f64,
    /// `L_multiplier`.
    pub l_multiplier: f64,
    /// ε.
    pub eps: f64,
    /// ψ.
    pub transform: Transform,
    /// Threshold role.
    pub threshold: Threshold,
}

/// The scalar requirements of [fire.params]: finite values, `L_init > 0`, `ε ≥ 0`, `c ≠ 0` with
/// the log transform, and a nonzero normaliser at query 0 (ε = 0 needs an active threshold with
/// `m ≠ 0`). spec: [fire.params], [fire.normalizer]
fn validate_scalars(
    c: f64,
    l_init: f64,
    l_multiplier: f64,
    eps: f64,
    transform: Transform,
    threshold: Threshold,
) -> Result<()> {
    ensure(c.is_finite() && l_multiplier.is_finite(), || {
        format!("FIRE c = {c} and L_multiplier = {l_multiplier} must be finite")
    })?;
    ensure(l_init > 0.0 && l_init.is_finite(), || {
        format!("FIRE needs a finite init_L > 0, got {l_init}")
    })?;
    ensure(eps >= 0.0 && eps.is_finite(), || {
        format!("FIRE needs a finite eps >= 0, got {eps}")
    })?;
    ensure(transform != Transform::Log || c != 0.0, || {
        "FIRE with the log transform needs c != 0 (c = 0 makes every bias constant)".into()
    })?;
    ensure(eps > 0.0 || threshold != Threshold::Disabled, || {
        "FIRE without a threshold needs eps > 0 (query 0 would divide 0 by 0)".into()
    })?;
    ensure(eps > 0.0 || l_multiplier != 0.0, || {
        "FIRE with eps = 0 needs L_multiplier != 0 (L = 0 divides 0 by 0 at query 0)".into()
    })
}

/// The state-dict index of layer `n` of f_θ inside `nn.Sequential` (activations take slots).
fn sequential_index(n: usize) -> usize {
    2 * n
}

impl Fire {
    /// A module with Appendix E's initialisation (`nn.Linear` defaults for f_θ, c = 0.1,
    /// `init_L` = 512, `L_multiplier` = 1 unless configured otherwise). spec: [fire.defaults]
    pub fn new(cfg: &FireConfig, heads: usize, path: &mut Path<'_>) -> Result<Self> {
        validate_scalars(
            cfg.c,
            cfg.l_init,
            cfg.l_multiplier,
            cfg.eps,
            cfg.transform,
            cfg.threshold,
        )?;
        let mut layers = Vec::with_capacity(cfg.depth + 1);
        let mut fan_in = 1;
        for n in 0..=cfg.depth {
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

    /// A module from explicit parameters (the conformance harness's entry point).
    pub fn from_params(p: &FireParams, device: &Device) -> Result<Self> {
        ensure(!p.layers.is_empty(), || {
            "FIRE needs at least one layer".into()
        })?;
        let mut width = 1;
        let mut layers = Vec::with_capacity(p.layers.len());
        for (n, (w, out, inp, b)) in p.layers.iter().enumerate() {
            ensure(*inp == width && *out > 0, || {
                format!("FIRE layer {n}: weight [{out}, {inp}] does not follow width {width}")
            })?;
            ensure(w.len() == out * inp && b.len() == *out, || {
                format!(
                    "FIRE layer {n}: {} weights and {} biases for [{out}, {inp}]",
                    w.len(),
                    b.len()
                )
            })?;
            ensure(w.iter().chain(b).all(|v| v.is_finite()), || {
                format!("FIRE layer {n}: non-finite parameter")
            })?;
            layers.push((
                Tensor::from_vec(w.clone(), (*out, *inp), device)?,
                Tensor::from_vec(b.clone(), *out, device)?,
            ));
            width = *out;
        }
        validate_scalars(
            p.c,
            p.l_init,
            p.l_multiplier,
            p.eps,
            p.transform,
            p.threshold,
        )?;
        let scalar = |v: f64| Tensor::new(v as f32, device);
        Ok(Self {
            layers,
            activation: p.activation,
            final_activation: p.final_activation,
            c: scalar(p.c)?,
            init_l: scalar(p.l_init)?,
            l_multiplier: scalar(p.l_multiplier)?,
            eps: p.eps,
            transform: p.transform,
            threshold: p.threshold,
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

    /// b(i, j) for every pair of `grid`, `[H, Q, K]` (keys after the query included: they get
    /// the mirrored value through |i − j|). spec: [fire.bias]
    pub fn bias_tensor(&self, grid: &Grid) -> Result<Tensor> {
        self.mlp(&self.input(grid)?)
    }

    /// b(i, j) at two arbitrary position lists, row-major `[H, Q, K]` as f32.
    pub fn bias(&self, queries: &[u64], keys: &[u64]) -> Result<Vec<f32>> {
        let grid = Grid::new(queries, keys, self.c.device())?;
        Ok(self
            .bias_tensor(&grid)?
            .to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1()?)
    }

    /// The module compiled for the fused kernel from its current weights: f_θ exactly
    /// piecewise linear (ReLU, identity) or evaluated directly (GeLU), ψ tabulated for
    /// distances below `capacity`.
    pub fn compile(&self, capacity: usize) -> Result<fast::FireBias> {
        let layers = self
            .layers
            .iter()
            .map(|(w, b)| fast::Linear::from_tensors(w, b))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let mlp = fast::Mlp::new(
            layers,
            fast_activation(self.activation),
            self.final_activation.map(fast_activation),
        )?;
        let params = fast::FireParams {
            c: scalar(&self.c)?,
            l_init: scalar(&self.init_l)?,
            l_multiplier: scalar(&self.l_multiplier)?,
            eps: self.eps,
            transform: match self.transform {
                Transform::Log => fast::Transform::Log,
                Transform::Identity => fast::Transform::Identity,
            },
            threshold: !matches!(self.threshold, Threshold::Disabled),
        };
        Ok(fast::FireBias::new(mlp, params, capacity)?)
    }

    /// The module for the fused training op: θ, `c` and `L_multiplier` packed into one
    /// differentiable tensor in [grad.layout]'s order (autograd splits the op's gradient back
    /// onto each variable; `init_L` enters as a constant). spec: [grad.layout]
    pub fn train_bias(&self) -> Result<LayerBias> {
        let mut parts = Vec::with_capacity(2 * self.layers.len() + 2);
        let mut shapes = Vec::with_capacity(self.layers.len());
        for (w, b) in &self.layers {
            shapes.push(w.dims2()?);
            parts.push(w.flatten_all()?);
            parts.push(b.flatten_all()?);
        }
        parts.push(self.c.reshape(1)?);
        parts.push(self.l_multiplier.reshape(1)?);
        let params = Tensor::cat(&parts, 0)?.to_dtype(DType::F32)?;
        let spec = FireSpec {
            layers: shapes,
            activation: fast_activation(self.activation),
            final_activation: self.final_activation.map(fast_activation),
            l_init: scalar(&self.init_l)?,
            eps: self.eps,
            transform: match self.transform {
                Transform::Log => fast::Transform::Log,
                Transform::Identity => fast::Transform::Identity,
            },
            threshold: !matches!(self.threshold, Threshold::Disabled),
        };
        Ok(LayerBias::Fire { spec, params })
    }

    /// The module's parameters as a PyTorch-style state dict (names relative to the module).
    pub fn state_dict(&self) -> Vec<(String, Tensor)> {
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

/// σ. spec: [fire.activation]
pub fn activate(x: &Tensor, a: Activation) -> Result<Tensor> {
    Ok(match a {
        // Not `x.relu()`: candle's backward takes relu'(0) = 1, while [grad.kinks] (and PyTorch
        // and JAX) take 0. Multiplying by the mask `x > 0`, which carries no gradient, gives the
        // same values and relu'(0) = 0. The conformance suite's `fire-grad/kinks/*` cases caught it.
        Activation::Relu => (x * x.gt(0.0)?.to_dtype(x.dtype())?)?,
        Activation::Gelu => x.gelu_erf()?,
        Activation::Identity => x.clone(),
    })
}

fn fast_activation(a: Activation) -> fast::Activation {
    match a {
        Activation::Relu => fast::Activation::Relu,
        Activation::Gelu => fast::Activation::Gelu,
        Activation::Identity => fast::Activation::Identity,
    }
}

/// Standard FIRE: one module per layer. spec: [fire.per-layer]
#[derive(Debug, Clone)]
pub struct PerLayer {
    /// Module of layer `l`.
    pub modules: Vec<Fire>,
}

impl PerLayer {
    /// One module per layer, or a configuration error.
    fn check_layers(&self, layers: usize) -> Result<()> {
        if layers == self.modules.len() {
            Ok(())
        } else {
            Err(Error::Config(format!(
                "FIRE has {} modules for {layers} layers",
                self.modules.len()
            )))
        }
    }
}

impl PositionEncoding for PerLayer {
    fn name(&self) -> &'static str {
        "fire"
    }
    fn biases(&self, grid: &Grid, layers: usize) -> Result<Vec<Option<Tensor>>> {
        self.check_layers(layers)?;
        self.modules
            .iter()
            .map(|m| m.bias_tensor(grid).map(Some))
            .collect()
    }
    fn fire_modules(&self) -> Vec<&Fire> {
        self.modules.iter().collect()
    }
    fn tile_bias(&self, layers: usize, capacity: usize) -> Result<Option<FusedEncoding>> {
        self.check_layers(layers)?;
        let sources = self
            .modules
            .iter()
            .map(|m| Ok(Box::new(m.compile(capacity)?) as Box<dyn fast::TileBias>))
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(FusedEncoding::per_layer(sources)))
    }
    fn train_bias(
        &self,
        layers: usize,
        _n: usize,
        _device: &Device,
    ) -> Result<Option<Vec<LayerBias>>> {
        self.check_layers(layers)?;
        self.modules
            .iter()
            .map(Fire::train_bias)
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }
}

/// FIRE-S: one module shared by all layers; its bias is computed once per call and the same
/// tensor is handed to every layer. spec: [fire.shared]
#[derive(Debug, Clone)]
pub struct Shared {
    /// The one module.
    pub module: Fire,
}

impl PositionEncoding for Shared {
    fn name(&self) -> &'static str {
        "fire-s"
    }
    fn biases(&self, grid: &Grid, layers: usize) -> Result<Vec<Option<Tensor>>> {
        let once = self.module.bias_tensor(grid)?;
        Ok(vec![Some(once); layers])
    }
    fn fire_modules(&self) -> Vec<&Fire> {
        vec![&self.module]
    }
    fn tile_bias(&self, layers: usize, capacity: usize) -> Result<Option<FusedEncoding>> {
        let once = Box::new(self.module.compile(capacity)?);
        Ok(Some(FusedEncoding::shared(once, layers)))
    }
    fn train_bias(
        &self,
        layers: usize,
        _n: usize,
        _device: &Device,
    ) -> Result<Option<Vec<LayerBias>>> {
        // Packed once: every layer's op feeds its gradient into the same tensor.
        let once = self.module.train_bias()?;
        Ok(Some(vec![once; layers]))
    }
}

/// Builds a standalone FIRE module with Appendix E's initialisation from `seed` (for tests and
/// `fire-lm bias` on fresh models).
pub fn standalone(cfg: &FireConfig, heads: usize, seed: u64, device: &Device) -> Result<Fire> {
    let mut store = ParamStore::fresh(device, seed);
    let mut root = store.root();
    Fire::new(cfg, heads, &mut root)
}
