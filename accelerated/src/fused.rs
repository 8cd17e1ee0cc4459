//! Fused evaluation: the model's additive encoding turned into the fast kernels' bias sources
//! ([`crate::fast`]), so evaluation runs through the tiled online-softmax attention and never
//! builds an `[H, N, N]` (nor `[H, chunk, N]`) tensor.
//!
//! Each encoding compiles itself once per evaluation from its current weights
//! ([`crate::encodings::PositionEncoding::tile_bias`]): FIRE compiles every layer's f_θ to its
//! exact piecewise-linear form (GeLU f_θ falls back to direct evaluation inside the kernel),
//! FIRE-S compiles once and every layer shares the one plan, the baselines tabulate their
//! distance function once. Rotary encodings (RoPE, RoPE-PI) have no additive bias and keep the
//! materialised candle path. This module serves evaluation and inference (no
//! autograd, CPU-only); training has its own fused op with a backward pass, [`crate::fused_op`].
//! spec: [attn.logits], [attn.causal], [fire.shared]

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};
use crate::fast::{BiasPlan, Position, TileBias};

/// Which attention implementation evaluation uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttentionPath {
    /// The fused kernel where the encoding is additive and the device is the CPU, the
    /// materialised candle path otherwise.
    #[default]
    Fused,
    /// Always the candle path (bias materialised per query chunk).
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

impl fmt::Display for AttentionPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for AttentionPath {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "fused" => Ok(AttentionPath::Fused),
            "materialised" | "materialized" => Ok(AttentionPath::Materialised),
            other => Err(Error::Config(format!(
                "unknown attention path `{other}` (fused or materialised)"
            ))),
        }
    }
}

/// An encoding ready for the fused kernel: a few bias sources and, per layer, which one it
/// uses (`None`: no bias, the NoPE fast path).
#[derive(Debug)]
pub struct FusedEncoding {
    sources: Vec<Box<dyn TileBias>>,
    layers: Vec<Option<usize>>,
}

impl FusedEncoding {
    /// `layers[l]` indexes `sources` (or is `None` for a layer without bias).
    pub fn new(sources: Vec<Box<dyn TileBias>>, layers: Vec<Option<usize>>) -> Result<Self> {
        if let Some(bad) = layers.iter().flatten().find(|&&s| s >= sources.len()) {
            return Err(Error::Config(format!(
                "fused encoding: layer refers to source {bad} of {}",
                sources.len()
            )));
        }
        Ok(Self { sources, layers })
    }

    /// No bias in any of `layers` layers (NoPE).
    pub fn none(layers: usize) -> Self {
        Self {
            sources: Vec::new(),
            layers: vec![None; layers],
        }
    }

    /// One source shared by every layer (FIRE-S, Alibi, T5, Sandwich).
    pub fn shared(source: Box<dyn TileBias>, layers: usize) -> Self {
        Self {
            sources: vec![source],
            layers: vec![Some(0); layers],
        }
    }

    /// One source per layer (FIRE, Kerple).
    pub fn per_layer(sources: Vec<Box<dyn TileBias>>) -> Self {
        let layers = (0..sources.len()).map(Some).collect();
        Self { sources, layers }
    }

    /// The number of layers.
    pub fn layers(&self) -> usize {
        self.layers.len()
    }

    /// Whether every source has a table form for the device kernel
    /// ([`crate::fast::device::DeviceBias`]; a GeLU FIRE has none).
    pub fn device_ready(&self) -> bool {
        self.sources
            .iter()
            .all(|s| s.device_bias(&[0], 1).is_some())
    }

    /// Every layer's bias as device tables for queries at `queries` and distances below
    /// `distances` (a shared source is tabulated once).
    pub fn device_biases(
        &self,
        queries: &[Position],
        distances: usize,
    ) -> Result<Vec<crate::fast::device::DeviceBias>> {
        let tables = self
            .sources
            .iter()
            .map(|s| {
                s.device_bias(queries, distances).ok_or_else(|| {
                    Error::Config(format!("{s:?} has no table form for the device kernel"))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(self
            .layers
            .iter()
            .map(|l| l.map_or(crate::fast::device::DeviceBias::None, |s| tables[s].clone()))
            .collect())
    }

    /// Builds each source's plan once for these positions (a shared source is planned once).
    pub fn plans<'a>(&'a self, queries: &'a [Position], keys: &'a [Position]) -> Result<Plans<'a>> {
        let plans = self
            .sources
            .iter()
            .map(|s| s.plan(queries, keys))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(Plans {
            plans,
            layers: &self.layers,
        })
    }
}

/// One call's plans.
pub struct Plans<'a> {
    plans: Vec<Box<dyn BiasPlan + 'a>>,
    layers: &'a [Option<usize>],
}

impl fmt::Debug for Plans<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plans")
            .field("plans", &self.plans.len())
            .field("layers", &self.layers)
            .finish()
    }
}

impl Plans<'_> {
    /// Layer `l`'s plan (`None`: no bias).
    pub fn layer(&self, l: usize) -> Option<&dyn BiasPlan> {
        self.layers
            .get(l)
            .copied()
            .flatten()
            .map(|s| self.plans[s].as_ref())
    }
}

/// A tensor's values in f64, row-major (for compiling weights into the kernels' plain numbers).
pub(crate) fn values(t: &candle_core::Tensor) -> Result<Vec<f64>> {
    Ok(t.to_dtype(candle_core::DType::F64)?
        .flatten_all()?
        .to_vec1()?)
}

/// A scalar tensor's value in f64.
pub(crate) fn scalar(t: &candle_core::Tensor) -> Result<f64> {
    values(t)?
        .first()
        .copied()
        .ok_or_else(|| Error::Config("empty scalar parameter".into()))
}
