//! Named parameters: the state dict of the model.
//!
//! Names follow PyTorch's `state_dict()` (`layers.0.attn.fire.mlp.0.weight`, …) so a PyTorch
//! checkpoint maps 1:1. Trainable tensors are candle [`Var`]s; frozen ones (FIRE's `init_L`)
//! are buffers: saved with the model, never updated. Initial values come from a seeded
//! [`SplitMix64`], so a model is a pure function of its config and seed.

use std::collections::{BTreeMap, HashMap};

use candle_core::{DType, Device, Tensor, Var};

use crate::error::{Error, Result};
use fire_vocabulary::SplitMix64;

/// How a fresh parameter is filled.
#[derive(Debug, Clone)]
pub enum Init {
    /// U(lo, hi), PyTorch's `nn.Linear` default with bound 1/√fan_in.
    Uniform(f64, f64),
    /// N(0, std²).
    Normal(f64),
    /// Every element equal.
    Const(f64),
    /// Explicit values (row-major).
    Values(Vec<f32>),
}

/// All parameters of one model, ordered by name (sums over parameters are then reproducible).
#[derive(Debug)]
pub struct ParamStore {
    device: Device,
    trainable: BTreeMap<String, Var>,
    frozen: BTreeMap<String, Tensor>,
    rng: SplitMix64,
    source: Option<HashMap<String, Tensor>>,
}

impl ParamStore {
    /// A store that initialises every parameter from `seed`.
    pub fn fresh(device: &Device, seed: u64) -> Self {
        Self {
            device: device.clone(),
            trainable: BTreeMap::new(),
            frozen: BTreeMap::new(),
            rng: SplitMix64::new(seed),
            source: None,
        }
    }

    /// A store that takes every parameter from `tensors` (a loaded state dict); a missing name
    /// or a wrong shape is an error.
    pub fn from_tensors(device: &Device, tensors: HashMap<String, Tensor>) -> Self {
        Self {
            source: Some(tensors),
            ..Self::fresh(device, 0)
        }
    }

    /// The device parameters live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The trainable parameters, by name.
    pub fn trainable(&self) -> &BTreeMap<String, Var> {
        &self.trainable
    }

    /// The whole state dict (trainable and frozen), by name.
    pub fn state_dict(&self) -> BTreeMap<String, Tensor> {
        let mut out: BTreeMap<String, Tensor> = self
            .trainable
            .iter()
            .map(|(k, v)| (k.clone(), v.as_tensor().clone()))
            .collect();
        out.extend(self.frozen.iter().map(|(k, v)| (k.clone(), v.clone())));
        out
    }

    /// The number of trainable scalars.
    pub fn trainable_count(&self) -> usize {
        self.trainable.values().map(|v| v.elem_count()).sum()
    }

    /// A builder rooted at the empty prefix.
    pub fn root(&mut self) -> Path<'_> {
        Path {
            store: self,
            prefix: String::new(),
        }
    }

    fn value(&mut self, name: &str, shape: &[usize], init: &Init) -> Result<Tensor> {
        if let Some(source) = &self.source {
            let t = source.get(name).ok_or_else(|| Error::Checkpoint {
                path: name.into(),
                reason: "parameter missing from the state dict".into(),
            })?;
            if t.dims() != shape {
                return Err(Error::Checkpoint {
                    path: name.into(),
                    reason: format!("shape {:?}, expected {shape:?}", t.dims()),
                });
            }
            return Ok(t.to_dtype(DType::F32)?.to_device(&self.device)?);
        }
        let n: usize = shape.iter().product();
        let data: Vec<f32> = match init {
            Init::Uniform(lo, hi) => (0..n).map(|_| self.rng.uniform(*lo, *hi) as f32).collect(),
            Init::Normal(std) => (0..n).map(|_| (self.rng.normal() * std) as f32).collect(),
            Init::Const(v) => vec![*v as f32; n],
            Init::Values(v) => {
                if v.len() != n {
                    return Err(Error::Input(format!(
                        "{name}: {} values for shape {shape:?}",
                        v.len()
                    )));
                }
                v.clone()
            }
        };
        Ok(Tensor::from_vec(data, shape, &self.device)?)
    }
}

/// A position in the parameter tree (`layers.3.attn`), handing out named parameters.
#[derive(Debug)]
pub struct Path<'a> {
    store: &'a mut ParamStore,
    prefix: String,
}

impl Path<'_> {
    /// The child `name` (`a.b` → `a.b.name`).
    pub fn pp(&mut self, name: impl std::fmt::Display) -> Path<'_> {
        let prefix = self.name(&name.to_string());
        Path {
            store: self.store,
            prefix,
        }
    }

    fn name(&self, leaf: &str) -> String {
        if self.prefix.is_empty() {
            leaf.to_owned()
        } else {
            format!("{}.{leaf}", self.prefix)
        }
    }

    /// A trainable parameter (a [`Var`]); the returned tensor carries its id, so gradients
    /// flow to it.
    pub fn param(&mut self, leaf: &str, shape: &[usize], init: Init) -> Result<Tensor> {
        let name = self.name(leaf);
        let t = self.store.value(&name, shape, &init)?;
        let var = Var::from_tensor(&t)?;
        let out = var.as_tensor().clone();
        self.store.trainable.insert(name, var);
        Ok(out)
    }

    /// A frozen parameter: saved and loaded with the model, never trained (FIRE's `init_L`).
    pub fn frozen(&mut self, leaf: &str, shape: &[usize], init: Init) -> Result<Tensor> {
        let name = self.name(leaf);
        let t = self.store.value(&name, shape, &init)?;
        self.store.frozen.insert(name, t.clone());
        Ok(t)
    }

    /// `n` draws from U(lo, hi) off the store's generator, for initialisations that derive
    /// several parameters from shared random numbers (a FIRE started as a Kerple-log).
    /// When the store loads a state dict the draws are made but unused.
    pub fn uniform(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..n).map(|_| self.store.rng.uniform(lo, hi)).collect()
    }

    /// The device.
    pub fn device(&self) -> Device {
        self.store.device.clone()
    }
}
