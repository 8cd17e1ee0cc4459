//! An additive encoding in a model: its modules arranged over the layers, one shared by every
//! layer or one per layer, serving every backend's form of the bias from the modules' own.
//! spec: [fire.shared], [fire.per-layer]

use candle_core::{Device, Tensor};

use crate::encodings::additive::{AdditiveModule, KernelBias, LayerBias};
use crate::encodings::encoding::PositionEncoding;
use crate::encodings::grid::Grid;
use crate::error::{Error, Result};

/// How an additive encoding's modules serve the layers.
#[derive(Debug, Clone)]
pub enum Layers<M> {
    /// One module for every layer: its bias is computed once per call and handed to each
    /// layer (FIRE-S, Alibi, T5, Sandwich). spec: [fire.shared]
    Shared(M),
    /// One module per layer (FIRE, Kerple). spec: [fire.per-layer]
    PerLayer(Vec<M>),
}

/// An additive encoding: named modules arranged over the layers.
#[derive(Debug, Clone)]
pub struct Additive<M> {
    name: &'static str,
    /// The modules.
    pub layers: Layers<M>,
}

impl<M: AdditiveModule> Additive<M> {
    /// One module shared by every layer.
    pub fn shared(name: &'static str, module: M) -> Self {
        Self {
            name,
            layers: Layers::Shared(module),
        }
    }

    /// One module per layer.
    pub fn per_layer(name: &'static str, modules: Vec<M>) -> Self {
        Self {
            name,
            layers: Layers::PerLayer(modules),
        }
    }

    /// Every distinct module, in layer order.
    fn distinct(&self) -> &[M] {
        match &self.layers {
            Layers::Shared(m) => std::slice::from_ref(m),
            Layers::PerLayer(ms) => ms,
        }
    }

    /// Fails unless the modules serve `layers` layers (one per layer, or one shared).
    fn check(&self, layers: usize) -> Result<()> {
        match &self.layers {
            Layers::PerLayer(ms) if ms.len() != layers => Err(Error::Config(format!(
                "{} has {} modules for {layers} layers",
                self.name,
                ms.len()
            ))),
            _ => Ok(()),
        }
    }

    /// `f(module)` for every layer: once in total for a shared module, once per module
    /// otherwise.
    fn each<T: Clone>(&self, layers: usize, f: impl Fn(&M) -> Result<T>) -> Result<Vec<T>> {
        self.check(layers)?;
        match &self.layers {
            Layers::Shared(m) => Ok(vec![f(m)?; layers]),
            Layers::PerLayer(ms) => ms.iter().map(f).collect(),
        }
    }
}

impl<M: AdditiveModule> PositionEncoding for Additive<M> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn biases(&self, grid: &Grid, layers: usize) -> Result<Vec<Option<Tensor>>> {
        self.each(layers, |m| m.bias_tensor(grid).map(Some))
    }

    fn modules(&self) -> Vec<&dyn AdditiveModule> {
        self.distinct()
            .iter()
            .map(|m| m as &dyn AdditiveModule)
            .collect()
    }

    fn tile_bias(&self, layers: usize, capacity: usize) -> Result<Option<KernelBias>> {
        self.check(layers)?;
        let shared = matches!(self.layers, Layers::Shared(_));
        let sources = self
            .distinct()
            .iter()
            .enumerate()
            .map(|(l, m)| {
                m.source(capacity)
                    .map_err(|e| e.in_module(self.name, (!shared).then_some(l)))
            })
            .collect::<Result<Vec<_>>>()?;
        let map = match &self.layers {
            Layers::Shared(_) => vec![Some(0); layers],
            Layers::PerLayer(_) => (0..layers).map(Some).collect(),
        };
        KernelBias::new(sources, map).map(Some)
    }

    fn train_bias(
        &self,
        layers: usize,
        n: usize,
        _device: &Device,
    ) -> Result<Option<Vec<LayerBias>>> {
        // A shared module is packed once: every layer's op feeds its gradient into the same
        // tensor.
        self.each(layers, |m| m.train_bias(n)).map(Some)
    }
}
