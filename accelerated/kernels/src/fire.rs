//! FIRE as a tile bias source: b_h(i, j) = f_θ,h( ψ(|i − j|) / (ψ(max(i, L)) + ε) ).
//!
//! Three things make a FIRE tile cheap:
//! 1. ψ depends on the distance only: a table `ψ(n)` for `n < capacity` is built once per
//!    module (it depends on `c` alone), stored reversed so that a row of keys reads it forwards.
//! 2. The normaliser depends on the query only: one reciprocal per query per call.
//! 3. f_θ is compiled ([`PiecewiseLinear`]). For a query `i`, `x` grows with the distance, so
//!    each breakpoint `t` becomes a distance threshold "the first `n` with `x(i, n) ≥ t`"
//!    (a binary search in the ψ table, once per query per breakpoint in `(0, 1]` — on the
//!    causal part `x ≤ 1`). A tile row is then a few runs, each `A·ψ(n) + C`: one
//!    multiply-add per entry, vectorised, no lookup in the inner loop.
//!
//! FIRE-S is the same source shared by every layer: build one [`FireBias`] and one plan per
//! forward pass, and hand the plan to every layer.
//!
//! Non-piecewise-linear f_θ (GeLU) falls back to evaluating the MLP per entry (hidden layers
//! once, then only the requested head's output row).
//!
//! spec: [fire.bias], [fire.psi], [fire.threshold], [fire.normalizer], [fire.input],
//! [fire.shared], [conv.future]

mod plan;
mod thresholds;

use fire_vocabulary::{Activation, Position, Threshold, Transform};

pub(crate) use plan::FirePlan;

use crate::compile::PiecewiseLinear;
use crate::device::{DeviceBias, DeviceTables};
use crate::error::{finite, Error, Result};
use crate::mlp::{Linear, Mlp};
use crate::tile::{BiasPlan, TileBias};

/// FIRE's scalar parameters (f_θ is an [`Mlp`] of its own): with the MLP they are a whole FIRE
/// module. spec: [fire.params]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FireParams {
    /// c of ψ_c (only |c| matters).
    pub c: f64,
    /// The frozen initial threshold L_init.
    pub l_init: f64,
    /// The learnable multiplier m.
    pub l_multiplier: f64,
    /// ε of the normaliser.
    pub eps: f64,
    /// ψ.
    pub transform: Transform,
    /// The threshold's role; only whether it is used matters here (a fixed m is frozen by the
    /// trainer, which ignores its gradient).
    pub threshold: Threshold,
}

impl FireParams {
    /// Appendix E's initial values: c = 0.1, L_init = 512, m = 1, ε = 1e-6. spec: [fire.defaults]
    pub fn appendix_e() -> Self {
        Self {
            c: 0.1,
            l_init: 512.0,
            l_multiplier: 1.0,
            eps: 1e-6,
            transform: Transform::Log,
            threshold: Threshold::Learnable,
        }
    }

    /// Rejects values the spec rejects. spec: [fire.params], [num.errors]
    pub fn validate(&self) -> Result<()> {
        finite("c", self.c)?;
        finite("L_init", self.l_init)?;
        finite("L_multiplier", self.l_multiplier)?;
        finite("eps", self.eps)?;
        let bad = |name: &str, reason: &str| {
            Err(Error::Parameter {
                name: name.into(),
                reason: reason.into(),
            })
        };
        if self.l_init <= 0.0 {
            return bad("L_init", "must be > 0");
        }
        if self.eps < 0.0 {
            return bad("eps", "must be >= 0");
        }
        if self.transform == Transform::Log && self.c == 0.0 {
            return bad("c", "must be != 0 with the log transform");
        }
        if self.eps == 0.0 && (!self.threshold.is_enabled() || self.l_multiplier == 0.0) {
            return bad("eps", "eps = 0 with no threshold divides 0 by 0 at query 0");
        }
        Ok(())
    }

    /// ψ(x). spec: [fire.psi]
    pub fn psi(&self, x: f64) -> f64 {
        match self.transform {
            Transform::Log => (self.c.abs() * x).ln_1p(),
            Transform::Identity => x,
        }
    }

    /// ψ(max(i, L)) + ε. spec: [fire.threshold], [fire.normalizer]
    pub fn normaliser(&self, i: f64) -> f64 {
        let t = if self.threshold.is_enabled() {
            i.max((self.l_multiplier * self.l_init).abs())
        } else {
            i
        };
        self.psi(t) + self.eps
    }

    /// x(i, j) in f64. spec: [fire.input], [conv.future]
    pub fn input(&self, i: Position, j: Position) -> f64 {
        self.psi(i.abs_diff(j) as f64) / self.normaliser(i as f64)
    }
}

/// A FIRE module whose trained numbers — θ, then `c` and `m` — arrive packed in one vector in
/// [grad.layout]'s order (the order of [`crate::fire_grad`]'s gradient): everything else about
/// it. A trainer keeps the numbers in its own differentiable tensors and rebuilds the module
/// from them at every step. spec: [grad.layout]
#[derive(Debug, Clone, PartialEq)]
pub struct PackedFire {
    /// `(out, in)` of every layer of f_θ.
    pub layers: Vec<(usize, usize)>,
    /// σ of the hidden layers.
    pub activation: Activation,
    /// Optional output activation.
    pub final_activation: Option<Activation>,
    /// `L_init`, ε, ψ and the threshold's role; `c` and `L_multiplier` are taken from the
    /// packed values instead.
    pub scalars: FireParams,
}

impl PackedFire {
    /// The number of packed parameters: θ, then `c` and `m`.
    pub fn packed_len(&self) -> usize {
        self.layers.iter().map(|(o, i)| o * (i + 1)).sum::<usize>() + 2
    }

    /// The module from packed values, compiled for distances below `capacity`.
    pub fn build(&self, packed: &[f32], capacity: usize) -> Result<FireBias> {
        if packed.len() != self.packed_len() {
            return Err(Error::Shape {
                what: "packed FIRE parameters".into(),
                expected: self.packed_len().to_string(),
                got: packed.len().to_string(),
            });
        }
        let mut at = 0;
        let mut take = |n: usize| {
            let v: Vec<f64> = packed[at..at + n].iter().map(|&x| f64::from(x)).collect();
            at += n;
            v
        };
        let mut layers = Vec::with_capacity(self.layers.len());
        for &(out, inp) in &self.layers {
            let w = take(out * inp);
            let b = take(out);
            layers.push(Linear::new(w, b, inp, out)?);
        }
        let scalars = take(2);
        let mlp = Mlp::new(layers, self.activation, self.final_activation)?;
        let params = FireParams {
            c: scalars[0],
            l_multiplier: scalars[1],
            ..self.scalars
        };
        FireBias::new(mlp, params, capacity)
    }
}

/// How f_θ is evaluated.
#[derive(Debug, Clone, PartialEq)]
pub enum FireFunction {
    /// Exact piecewise-linear form (ReLU / identity MLPs).
    Compiled(PiecewiseLinear),
    /// Direct evaluation (GeLU).
    Direct(Mlp),
}

/// A FIRE module ready for the fused kernel.
#[derive(Debug, Clone)]
pub struct FireBias {
    function: FireFunction,
    /// f_θ itself (the backward pass differentiates it).
    pub(crate) mlp: Mlp,
    params: FireParams,
    heads: usize,
    /// Distances the ψ table holds.
    capacity: usize,
    /// `psi_rev[capacity − 1 − n] = ψ(n)`, f32, then [`TABLE_PAD`] zeros: the keys past the
    /// diagonal, which a causal row handed back as affine in the table reads in the columns
    /// the kernel masks.
    psi_rev: Vec<f32>,
}

/// Entries past distance 0 in [`FireBias`]'s reversed ψ table: a causal tile row handed back
/// to the score product reads its whole stride from the table, past its last visible key by
/// up to a stride (the kernels' tiles are at most this wide).
pub(crate) const TABLE_PAD: usize = 1024;

impl FireBias {
    /// Compiles `mlp` when it is piecewise linear and tabulates ψ for distances below
    /// `capacity` (e.g. the longest context the model will see; longer distances still work,
    /// on a slower per-entry path).
    pub fn new(mlp: Mlp, params: FireParams, capacity: usize) -> Result<Self> {
        params.validate()?;
        let heads = mlp.heads();
        let function = if mlp.is_piecewise_linear() {
            FireFunction::Compiled(PiecewiseLinear::compile(&mlp)?)
        } else {
            FireFunction::Direct(mlp.clone())
        };
        let capacity = capacity.clamp(1, u32::MAX as usize);
        let psi_rev = (0..capacity)
            .rev()
            .map(|n| params.psi(n as f64) as f32)
            .chain(std::iter::repeat_n(0.0, TABLE_PAD))
            .collect();
        Ok(Self {
            function,
            mlp,
            params,
            heads,
            capacity,
            psi_rev,
        })
    }

    /// `mlp` evaluated (and differentiated) directly, pair by pair, even when it would compile:
    /// the slow twin of the compiled path, for tests and comparisons.
    pub fn direct(mlp: Mlp, params: FireParams, capacity: usize) -> Result<Self> {
        let mut fire = Self::new(mlp, params, capacity)?;
        fire.function = FireFunction::Direct(fire.mlp.clone());
        Ok(fire)
    }

    /// The scalar parameters.
    pub fn params(&self) -> &FireParams {
        &self.params
    }

    /// How f_θ is evaluated.
    pub fn function(&self) -> &FireFunction {
        &self.function
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// The reversed ψ table: `[capacity − 1 − n] = ψ(n)`.
    pub(crate) fn psi_rev_slice(&self) -> &[f32] {
        &self.psi_rev
    }

    /// ψ(n) from the table; `n < capacity`.
    fn psi_at(&self, n: usize) -> f32 {
        self.psi_rev[self.capacity() - 1 - n]
    }

    /// ψ(n) in f32: from the table when it holds `n`.
    pub(crate) fn psi(&self, n: u64) -> f32 {
        let m = self.capacity() as u64;
        if n < m {
            self.psi_rev[(m - 1 - n) as usize]
        } else {
            self.params.psi(n as f64) as f32
        }
    }
}

impl TileBias for FireBias {
    fn heads(&self) -> usize {
        self.heads
    }

    fn plan<'a>(
        &'a self,
        queries: &'a [Position],
        keys: &'a [Position],
    ) -> Result<Box<dyn BiasPlan + 'a>> {
        Ok(Box::new(self.fire_plan(queries, keys)?))
    }
}

impl DeviceTables for FireBias {
    fn device_bias(&self, queries: &[Position], distances: usize) -> Option<DeviceBias> {
        let FireFunction::Compiled(pl) = &self.function else {
            return None;
        };
        let (mut slope, mut intercept) = (Vec::new(), Vec::new());
        for h in 0..self.heads {
            let (s, c) = pl.head_pieces(h);
            slope.extend_from_slice(s);
            intercept.extend_from_slice(c);
        }
        Some(DeviceBias::Fire {
            psi: (0..distances as u64).map(|n| self.psi(n)).collect(),
            inv: queries
                .iter()
                .map(|&i| (1.0 / self.params.normaliser(i as f64)) as f32)
                .collect(),
            breakpoints: pl.breakpoints().iter().map(|&t| t as f32).collect(),
            slope,
            intercept,
        })
    }
}
