//! Causal multi-head self-attention, softmax(q·kᵀ/√d + b + mask)·v with the bias added after
//! the 1/√d scaling, and the four backends that compute it:
//!
//! | backend | module | when |
//! |---|---|---|
//! | candle ops, the bias materialised | [`candle`] | rotary encodings, `--attention materialised`, and training off the CPU |
//! | fused kernel, evaluation and generation | [`fused_eval`] | additive encodings on the CPU |
//! | fused op with a backward pass, training | [`fused_train`] | additive encodings on the CPU, f32 |
//! | fused kernel on CUDA, evaluation and generation | `cuda` (feature `cuda`) | additive encodings with a table form on CUDA |
//!
//! The backend is chosen once ([`Backend::select`], through [`crate::Model::backend`]) from the
//! configured [`AttentionPath`], the purpose, the encoding and the device, and every forward
//! pass of the model takes it; per call it is prepared once ([`Backend::prepare`]) and every
//! layer attends through the prepared [`Call`]. spec: [attn.logits], [attn.placement],
//! [attn.causal]

pub mod candle;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod fused_eval;
pub mod fused_train;

use candle_core::{Device, Tensor};
use fire_kernels::{DeviceBias, Position};
use serde::{Deserialize, Serialize};

use crate::encodings::{Grid, KernelBias, LayerBias, PositionEncoding};
use crate::error::{Error, Result};
use crate::nn::Linear;
use crate::params::Path;

pub use candle::{causal_head, causal_mask};

/// Which attention implementation a run asks for (`--attention`, and the `attention` field of
/// training and evaluation configs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum AttentionPath {
    /// The fused backend where the encoding is additive and the device can run it (the CPU;
    /// CUDA for evaluation and generation), the candle backend otherwise.
    #[default]
    Fused,
    /// Always the candle backend (bias materialised per query chunk).
    #[value(alias = "materialized")]
    Materialised,
}

impl AttentionPath {
    /// The name `fused` or `materialised`.
    pub fn name(self) -> &'static str {
        match self {
            AttentionPath::Fused => "fused",
            AttentionPath::Materialised => "materialised",
        }
    }
}

impl std::fmt::Display for AttentionPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for AttentionPath {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        <Self as clap::ValueEnum>::from_str(s, false).map_err(|_| {
            Error::Config(format!(
                "unknown attention path `{s}` (fused or materialised)"
            ))
        })
    }
}

/// What the forward passes are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// Training: positions `0..T`, no cache, autograd.
    Train,
    /// Evaluation or generation: sequences up to `capacity` tokens (the fused backends
    /// tabulate distances below it), the candle backend in query chunks of `chunk` tokens
    /// when a cache is used.
    Infer {
        /// The longest sequence (prompt and generated tokens) the run will see.
        capacity: usize,
        /// The candle backend's query chunk.
        chunk: usize,
    },
}

/// The attention implementation a run uses, chosen once.
#[derive(Debug)]
pub enum Backend {
    /// candle ops; with a cache, queries in chunks of at most `chunk` tokens.
    Candle {
        /// Query-chunk size (memory is `[B, H, chunk, K]` per layer).
        chunk: usize,
    },
    /// The fused CPU kernel with the encoding compiled once (inference).
    FusedEval(KernelBias),
    /// The fused CPU op with a backward pass (training).
    FusedTrain,
    /// The fused CUDA kernel with the encoding compiled once (inference, feature `cuda`).
    Cuda(KernelBias),
}

impl Backend {
    /// Chooses the backend for `purpose` from the configured `path`, the model's encoding
    /// (`layers` layers) and its device: a fused backend where it applies, candle otherwise.
    pub fn select(
        path: AttentionPath,
        purpose: Purpose,
        encoding: &dyn PositionEncoding,
        layers: usize,
        device: &Device,
    ) -> Result<Self> {
        let fused = path == AttentionPath::Fused;
        Ok(match purpose {
            Purpose::Train => {
                let additive = matches!(encoding.train_bias(layers, 1, device), Ok(Some(_)));
                if fused && device.is_cpu() && additive {
                    Backend::FusedTrain
                } else {
                    Backend::Candle { chunk: usize::MAX }
                }
            }
            Purpose::Infer { capacity, chunk } => {
                let candle = Backend::Candle {
                    chunk: chunk.max(1),
                };
                let device_kernel = cfg!(feature = "cuda") && device.is_cuda();
                if !fused || !(device.is_cpu() || device_kernel) {
                    return Ok(candle);
                }
                match encoding.tile_bias(layers, capacity)? {
                    Some(k) if device.is_cpu() => Backend::FusedEval(k),
                    // A GeLU FIRE has no table form for the device kernel.
                    Some(k) if has_tables(&k) => Backend::Cuda(k),
                    _ => candle,
                }
            }
        })
    }

    /// Prepares one call at query positions `start..start + len` against keys
    /// `0..start + len` (the cached positions, then these): each layer's bias in this
    /// backend's form, built once and shared by the layers that share a source.
    pub fn prepare<'a>(
        &'a self,
        encoding: &dyn PositionEncoding,
        layers: usize,
        positions: &'a Positions,
        device: &Device,
    ) -> Result<Call<'a>> {
        let (queries, keys) = (&positions.queries, &positions.keys);
        Ok(match self {
            Backend::Candle { .. } => {
                let grid = Grid::new(queries, keys, device)?;
                Call::Candle {
                    biases: encoding.biases(&grid, layers)?,
                    mask: causal_mask(queries, keys, device)?,
                    queries,
                }
            }
            Backend::FusedEval(k) => {
                check_layers(k, layers)?;
                Call::FusedEval {
                    plans: fused_eval::Plans::new(k, queries, keys)?,
                    queries,
                    keys,
                }
            }
            Backend::FusedTrain => {
                let biases = encoding
                    .train_bias(layers, queries.len(), device)?
                    .ok_or_else(|| {
                        Error::Config(format!(
                            "fused training attention needs an additive encoding; `{}` \
                             rotates queries and keys (use the materialised path)",
                            encoding.name()
                        ))
                    })?;
                Call::FusedTrain {
                    biases,
                    start: queries.first().copied().unwrap_or(0),
                }
            }
            Backend::Cuda(k) => {
                check_layers(k, layers)?;
                Call::Cuda {
                    tables: device_tables(k, queries, keys.len())?,
                    q0: positions.start,
                }
            }
        })
    }
}

/// Whether every source of `k` has the device kernel's table form.
fn has_tables(k: &KernelBias) -> bool {
    k.sources().iter().all(|s| s.device_bias(&[0], 1).is_some())
}

/// Every layer's bias as device tables for queries at `queries` and distances below
/// `distances` (a shared source is tabulated once).
fn device_tables(
    k: &KernelBias,
    queries: &[Position],
    distances: usize,
) -> Result<Vec<DeviceBias>> {
    let tables = k
        .sources()
        .iter()
        .map(|s| {
            s.device_bias(queries, distances).ok_or_else(|| {
                Error::Config(format!("{s:?} has no table form for the device kernel"))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((0..k.layers())
        .map(|l| k.layer(l).map_or(DeviceBias::None, |s| tables[s].clone()))
        .collect())
}

fn check_layers(k: &KernelBias, layers: usize) -> Result<()> {
    if k.layers() == layers {
        Ok(())
    } else {
        Err(Error::Input(format!(
            "the compiled encoding has {} layers, the model {layers}",
            k.layers()
        )))
    }
}

/// The positions of one call: queries `start..start + len`, keys `0..start + len`.
#[derive(Debug, Clone)]
pub struct Positions {
    /// The first query position (the number of cached positions).
    pub start: usize,
    /// `start..start + len`.
    pub queries: Vec<Position>,
    /// `0..start + len`.
    pub keys: Vec<Position>,
}

impl Positions {
    /// `len` positions standing alone from `first` on, queries and keys both
    /// `first..first + len`: a training sequence placed at a randomised offset (only FIRE's
    /// normaliser notices; distance-only biases are those of `0..len`). No cache: `start` is 0
    /// only when `first` is.
    pub fn shifted(first: Position, len: usize) -> Self {
        let positions: Vec<Position> = (first..first + len as Position).collect();
        Self {
            start: first as usize,
            queries: positions.clone(),
            keys: positions,
        }
    }

    /// `len` queries continuing `start` cached positions.
    pub fn causal(start: usize, len: usize) -> Self {
        let end = (start + len) as Position;
        Self {
            start,
            queries: (start as Position..end).collect(),
            keys: (0..end).collect(),
        }
    }
}

/// One call prepared by [`Backend::prepare`].
#[derive(Debug)]
pub enum Call<'a> {
    /// Every layer's bias `[H, T, K]` (or none) and the causal mask `[T, K]`.
    Candle {
        /// Per layer.
        biases: Vec<Option<Tensor>>,
        /// `[T, K]`.
        mask: Tensor,
        /// The query positions (rotary encodings rotate by them).
        queries: &'a [Position],
    },
    /// Every source planned for these positions.
    FusedEval {
        /// The plans.
        plans: fused_eval::Plans<'a>,
        /// Query positions.
        queries: &'a [Position],
        /// Key positions.
        keys: &'a [Position],
    },
    /// Every layer's differentiable bias parameters.
    FusedTrain {
        /// Per layer.
        biases: Vec<LayerBias>,
        /// The first position: queries and keys are both `start..start + T` (no cache).
        start: Position,
    },
    /// Every layer's device tables; queries at `q0..`.
    Cuda {
        /// Per layer.
        tables: Vec<DeviceBias>,
        /// The first query position.
        q0: usize,
    },
}

impl Call<'_> {
    /// Layer `l`'s attention: `q: [B, H, T, d]` against `k, v: [B, H, K, d]` (the cached keys
    /// and values, then this call's), returning `[B, H, T, d]`.
    fn attend(&self, l: usize, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
        match self {
            Call::Candle { biases, mask, .. } => candle::attend(q, k, v, biases[l].as_ref(), mask),
            Call::FusedEval {
                plans,
                queries,
                keys,
            } => fused_eval::attend(q, k, v, queries, keys, plans.layer(l)),
            Call::FusedTrain { biases, start } => {
                fused_train::attend(q, k, v, &biases[l], *start, l)
            }
            Call::Cuda { tables, q0 } => {
                #[cfg(feature = "cuda")]
                {
                    cuda::attend(q, k, v, *q0, tables[l].clone())
                }
                #[cfg(not(feature = "cuda"))]
                {
                    let _ = (tables, q0, k, v);
                    Err(Error::Config(format!(
                        "the fused attention on {:?} needs the `cuda` feature",
                        q.device()
                    )))
                }
            }
        }
    }
}

/// The keys and values a layer has already seen (for chunked evaluation and decoding).
///
/// Entries are detached: the cache is an inference device, so earlier chunks' autograd graphs
/// are released as soon as they are done.
#[derive(Debug, Clone, Default)]
pub struct LayerCache {
    /// `[B, H, K, d]`, already rotated when the encoding is rotary.
    pub k: Option<Tensor>,
    /// `[B, H, K, d]`.
    pub v: Option<Tensor>,
}

impl LayerCache {
    /// Appends this step's keys and values (`[B, H, T, d]`) after the cached ones and returns
    /// the full `[B, H, K + T, d]` pair the step attends to; the cache keeps detached copies.
    pub fn append(&mut self, k: Tensor, v: Tensor) -> Result<(Tensor, Tensor)> {
        let k = match &self.k {
            Some(old) => Tensor::cat(&[old, &k], 2)?,
            None => k,
        };
        let v = match &self.v {
            Some(old) => Tensor::cat(&[old, &v], 2)?,
            None => v,
        };
        self.k = Some(k.detach());
        self.v = Some(v.detach());
        Ok((k, v))
    }

    /// The number of cached positions.
    pub fn len(&self) -> usize {
        self.k.as_ref().map_or(0, |k| k.dims()[2])
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Multi-head causal self-attention (no biases on the projections, as in most modern LMs).
#[derive(Debug, Clone)]
pub struct Attention {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    heads: usize,
    head_dim: usize,
}

impl Attention {
    /// Projections `q_proj`, `k_proj`, `v_proj`, `o_proj` under `path`, initialised by
    /// `cfg.init` (`o_proj` writes into the residual stream).
    pub fn new(
        path: &mut Path<'_>,
        d_model: usize,
        heads: usize,
        cfg: &crate::config::ModelConfig,
    ) -> Result<Self> {
        let proj = |path: &mut Path<'_>, name: &str, residual: bool| {
            crate::model::projection(&mut path.pp(name), d_model, d_model, false, residual, cfg)
        };
        Ok(Self {
            q: proj(path, "q_proj", false)?,
            k: proj(path, "k_proj", false)?,
            v: proj(path, "v_proj", false)?,
            o: proj(path, "o_proj", true)?,
            heads,
            head_dim: d_model / heads,
        })
    }

    /// The four projections `q, k, v, o`: what the fused block ([`crate::ops::block`]) takes
    /// as parameters.
    pub(crate) fn projections(&self) -> [&Linear; 4] {
        [&self.q, &self.k, &self.v, &self.o]
    }

    fn split(&self, x: &Tensor) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        Ok(x.reshape((b, t, self.heads, self.head_dim))?
            .transpose(1, 2)?
            .contiguous()?)
    }

    /// Layer `l` of the call: `x: [B, T, D]` at the call's query positions; the keys are the
    /// cached positions followed by these. Rotary encodings rotate queries and keys (only the
    /// candle backend serves them; for additive encodings the rotation is the identity).
    pub fn forward(
        &self,
        x: &Tensor,
        call: &Call<'_>,
        l: usize,
        encoding: &dyn PositionEncoding,
        cache: Option<&mut LayerCache>,
    ) -> Result<Tensor> {
        let (b, t, d_model) = x.dims3()?;
        let (mut q, mut k) = (
            self.split(&self.q.forward(x)?)?,
            self.split(&self.k.forward(x)?)?,
        );
        if let Call::Candle { queries, .. } = call {
            q = encoding.rotate(&q, queries)?;
            k = encoding.rotate(&k, queries)?;
        }
        let v = self.split(&self.v.forward(x)?)?;
        let (k, v) = match cache {
            Some(c) => c.append(k, v)?,
            None => (k, v),
        };
        let out = call.attend(l, &q, &k, &v)?;
        let out = out.transpose(1, 2)?.reshape((b, t, d_model))?;
        self.o.forward(&out)
    }
}
