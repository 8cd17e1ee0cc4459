//! The decoder-only Transformer: token embedding, pre-LayerNorm blocks (causal self-attention
//! with a pluggable positional encoding, then a GeLU MLP), a final LayerNorm and a tied or
//! untied LM head. State-dict names: `embed.weight`, `layers.{l}.{ln1,attn,ln2,mlp}.…`,
//! `ln_f.…`, `lm_head.weight`.

use candle_core::{Device, Tensor};

use crate::attention::{Attention, AttentionPath, Backend, Call, LayerCache, Positions, Purpose};
use crate::config::{InitScheme, ModelConfig};
use crate::encodings::{self, LayerBias, PositionEncoding};
use crate::error::{ensure, Error, Result};
use crate::nn::{LayerNorm, Linear};
use crate::ops;
use crate::params::{Init, ParamStore};

mod step;
pub use step::StepGradients;

/// One pre-LayerNorm block: `x + attn(ln1(x))`, then `x + mlp(ln2(x))`.
#[derive(Debug, Clone)]
pub struct Block {
    ln1: LayerNorm,
    attn: Attention,
    ln2: LayerNorm,
    fc1: Linear,
    fc2: Linear,
}

impl Block {
    /// The block's parameters in [`ops::block`]'s order, concatenated, or `None` when its
    /// shape is not the one that op computes (biases on the attention projections, none on the
    /// MLP).
    ///
    /// As rows of `D` values where every part divides into them (the op reads only the order):
    /// the weights that are `[·, D]` already (`W_q, W_k, W_v, W_o, W₁`, three quarters of the
    /// values) then enter the `cat` as they are. Each reshape is a node of candle's autograd,
    /// and candle gives every node's input its gradient as a fresh zero tensor plus the
    /// incoming one (two passes over memory), so a flattened weight costs its gradient twice
    /// that, once for the `cat` and once for the reshape. Otherwise (`F` not a multiple of
    /// `D`) every part is flattened.
    fn flat_params(&self, d: usize) -> Result<Option<Tensor>> {
        let Some(parts) = self.param_parts() else {
            return Ok(None);
        };
        let rows_of_d = d > 0 && parts.iter().all(|t| t.elem_count() % d == 0);
        let parts = parts
            .into_iter()
            .map(|t| match t.dims() {
                [_, cols] if rows_of_d && *cols == d => Ok(t.clone()),
                _ if rows_of_d => t.reshape((t.elem_count() / d, d)),
                _ => t.flatten_all(),
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(Some(Tensor::cat(&parts, 0)?))
    }

    /// The block's parameters in [`ops::block`]'s order, or `None` when its shape is not the
    /// one that op computes (biases on the attention projections, none on the MLP, two
    /// LayerNorms with different ε).
    fn param_parts(&self) -> Option<[&Tensor; 12]> {
        let [q, k, v, o] = self.attn.projections();
        let (Some(b1), Some(b2)) = (&self.fc1.bias, &self.fc2.bias) else {
            return None;
        };
        if [q, k, v, o].iter().any(|p| p.bias.is_some()) || self.ln1.eps != self.ln2.eps {
            return None;
        }
        Some([
            &self.ln1.weight,
            &self.ln1.bias,
            &q.weight,
            &k.weight,
            &v.weight,
            &o.weight,
            &self.ln2.weight,
            &self.ln2.bias,
            &self.fc1.weight,
            b1,
            &self.fc2.weight,
            b2,
        ])
    }

    fn fused(
        &self,
        x: &Tensor,
        bias: &LayerBias,
        start: u64,
        layer: usize,
        cfg: &ModelConfig,
    ) -> Result<Option<Tensor>> {
        if !ops::fusable(x) {
            return Ok(None);
        }
        let Some(params) = self.flat_params(cfg.d_model)? else {
            return Ok(None);
        };
        let dims = ops::block::Dims {
            d_model: cfg.d_model,
            heads: cfg.n_heads,
            d_ff: cfg.d_ff,
        };
        let y = ops::block::block(x, &params, bias, dims, self.ln1.eps, start, layer)?;
        Ok(Some(y))
    }

    /// The rest of the block once attention gave `h`: `x + h`, then `+ mlp(ln2(·))`.
    fn after_attention(&self, x: &Tensor, h: &Tensor) -> Result<Tensor> {
        let x = (x + h)?;
        let m = self.fc1.forward_gelu(&self.ln2.forward(&x)?)?;
        Ok((&x + self.fc2.forward(&m)?)?)
    }
}

/// A projection of the Transformer initialised by `cfg.init`; `residual` marks the layers
/// that write into the residual stream (GPT-2 scales them by 1/√(2·layers)).
pub(crate) fn projection(
    path: &mut crate::params::Path<'_>,
    fan_in: usize,
    fan_out: usize,
    bias: bool,
    residual: bool,
    cfg: &ModelConfig,
) -> Result<Linear> {
    match cfg.init {
        InitScheme::FanIn => Linear::new(path, fan_in, fan_out, bias),
        InitScheme::Gpt2 => {
            let scale = if residual {
                (2.0 * cfg.n_layers as f64).sqrt()
            } else {
                1.0
            };
            Linear::normal(path, fan_in, fan_out, bias, cfg.init_std / scale)
        }
    }
}

/// Per-layer key/value caches for chunked evaluation and incremental decoding.
#[derive(Debug, Clone, Default)]
pub struct Cache {
    /// One entry per layer.
    pub layers: Vec<LayerCache>,
}

impl Cache {
    /// The number of positions already processed.
    pub fn len(&self) -> usize {
        self.layers.first().map_or(0, LayerCache::len)
    }

    /// True when nothing has been processed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The model.
#[derive(Debug)]
pub struct Model {
    /// Its configuration.
    pub cfg: ModelConfig,
    embed: Tensor,
    blocks: Vec<Block>,
    ln_f: LayerNorm,
    head: Option<Linear>,
    /// The positional encoding.
    pub encoding: Box<dyn PositionEncoding>,
    device: Device,
    fused_blocks: bool,
}

impl Model {
    /// Builds the model, taking (or initialising) its parameters from `store`.
    pub fn new(cfg: &ModelConfig, store: &mut ParamStore) -> Result<Self> {
        cfg.validate()?;
        let device = store.device().clone();
        let mut root = store.root();
        let d = cfg.d_model;
        let std = cfg.init_std;
        let embed = root
            .pp("embed")
            .param("weight", &[cfg.vocab_size, d], Init::Normal(std))?;
        let mut blocks = Vec::with_capacity(cfg.n_layers);
        for l in 0..cfg.n_layers {
            let mut p = root.pp(format!("layers.{l}"));
            let ln1 = LayerNorm::new(&mut p.pp("ln1"), d, cfg.layer_norm_eps)?;
            let attn = Attention::new(&mut p.pp("attn"), d, cfg.n_heads, cfg)?;
            let ln2 = LayerNorm::new(&mut p.pp("ln2"), d, cfg.layer_norm_eps)?;
            let fc1 = projection(&mut p.pp("mlp.fc1"), d, cfg.d_ff, true, false, cfg)?;
            let fc2 = projection(&mut p.pp("mlp.fc2"), cfg.d_ff, d, true, true, cfg)?;
            blocks.push(Block {
                ln1,
                attn,
                ln2,
                fc1,
                fc2,
            });
        }
        let ln_f = LayerNorm::new(&mut root.pp("ln_f"), d, cfg.layer_norm_eps)?;
        let head = if cfg.tie_embeddings {
            None
        } else {
            Some(Linear::normal(
                &mut root.pp("lm_head"),
                d,
                cfg.vocab_size,
                false,
                std,
            )?)
        };
        let encoding = encodings::build(cfg, &mut root)?;
        Ok(Self {
            cfg: cfg.clone(),
            embed,
            blocks,
            ln_f,
            head,
            encoding,
            device,
            fused_blocks: true,
        })
    }

    /// Whether training through the fused attention runs each block as one fused op
    /// ([`crate::ops::block`], the default) or as candle ops (its slow twin): for the parity
    /// tests and the before/after benchmarks. Both compute the same function.
    pub fn set_fused_blocks(&mut self, on: bool) {
        self.fused_blocks = on;
    }

    /// Token embeddings `[B, T, D]` of `tokens` (`[B, T]`, u32).
    fn embed(&self, tokens: &Tensor) -> Result<Tensor> {
        let (b, t) = tokens.dims2()?;
        Ok(self
            .embed
            .index_select(&tokens.flatten_all()?, 0)?
            .reshape((b, t, self.cfg.d_model))?)
    }

    /// The final LayerNorm and the (tied or untied) LM head: logits `[B, T, V]`.
    fn logits(&self, x: &Tensor) -> Result<Tensor> {
        let x = self.ln_f.forward(x)?;
        match &self.head {
            Some(head) => head.forward(&x),
            // One product over all B·T rows, as `Linear` does: a batched product would give
            // the embedding's gradient as a `[B, D, V]` tensor for candle to sum over B.
            None => {
                let (b, t, d) = x.dims3()?;
                let logits = x.reshape((b * t, d))?.matmul(&self.embed.t()?)?;
                Ok(logits.reshape((b, t, self.cfg.vocab_size))?)
            }
        }
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// An empty cache with one slot per layer.
    pub fn new_cache(&self) -> Cache {
        Cache {
            layers: vec![LayerCache::default(); self.blocks.len()],
        }
    }

    /// The attention backend for `purpose` under the configured `path`, chosen once from this
    /// model's encoding and device (see [`crate::attention`]): compiling the encoding for the
    /// fused kernels happens here, from the current weights.
    pub fn backend(&self, path: AttentionPath, purpose: Purpose) -> Result<Backend> {
        Backend::select(
            path,
            purpose,
            self.encoding.as_ref(),
            self.blocks.len(),
            &self.device,
        )
    }

    /// Logits `[B, T, V]` for `tokens` (`[B, T]`, u32) through `backend`.
    ///
    /// The tokens continue the cached sequence at positions `cache.len()..` (`0..` without a
    /// cache), and every query's FIRE normaliser uses its own position, so one token at a time
    /// is KV-cache decoding. The candle backend processes queries in chunks of its `chunk`
    /// (with a cache, or through a fresh one when the sequence is longer): each layer
    /// materialises at most `[B, H, chunk, K]` logits. The fused backends take the whole
    /// sequence in one call and never build an `[H, T, K]` tensor; the training one takes no
    /// cache (positions `0..T`).
    pub fn forward(
        &self,
        tokens: &Tensor,
        backend: &Backend,
        cache: Option<&mut Cache>,
    ) -> Result<Tensor> {
        let (_, t) = tokens.dims2()?;
        ensure(t > 0, || "empty token sequence".into())?;
        if let Some(c) = cache.as_deref() {
            ensure(c.layers.len() == self.blocks.len(), || {
                "cache does not belong to this model".into()
            })?;
        }
        match (backend, cache) {
            (Backend::FusedTrain, Some(_)) => Err(Error::Input(
                "the fused training backend takes no cache (positions 0..T)".into(),
            )),
            (Backend::Candle { chunk }, Some(cache)) => {
                self.chunked(tokens, backend, cache, *chunk)
            }
            (Backend::Candle { chunk }, None) if *chunk < t => {
                self.chunked(tokens, backend, &mut self.new_cache(), *chunk)
            }
            (_, cache) => self.call(tokens, backend, cache),
        }
    }

    /// Logits `[B, T, V]` for `tokens` standing alone at positions `first..first + T` (queries
    /// and keys alike, no cache) through a training backend: training with randomised
    /// position offsets ([`crate::train::TrainConfig::position_offset`]). `first = 0` is
    /// [`Self::forward`] without a cache.
    pub fn forward_at(&self, tokens: &Tensor, backend: &Backend, first: u64) -> Result<Tensor> {
        if first == 0 {
            return self.forward(tokens, backend, None);
        }
        let (_, t) = tokens.dims2()?;
        ensure(t > 0, || "empty token sequence".into())?;
        match backend {
            Backend::FusedTrain | Backend::Candle { .. } => {
                self.call_at(tokens, backend, &Positions::shifted(first, t), None)
            }
            // The inference kernels read keys from position 0 (a cache).
            _ => Err(Error::Input(
                "position offsets need a training backend (fused training or candle)".into(),
            )),
        }
    }

    /// [`Self::forward`] on the candle backend in query chunks of at most `chunk` tokens.
    fn chunked(
        &self,
        tokens: &Tensor,
        backend: &Backend,
        cache: &mut Cache,
        chunk: usize,
    ) -> Result<Tensor> {
        let (_, t) = tokens.dims2()?;
        let chunk = chunk.max(1);
        let mut outs = Vec::with_capacity(t.div_ceil(chunk));
        let mut s = 0;
        while s < t {
            let len = chunk.min(t - s);
            let piece = tokens.narrow(1, s, len)?;
            outs.push(self.call(&piece, backend, Some(cache))?);
            s += len;
        }
        Ok(Tensor::cat(&outs, 1)?)
    }

    /// One attention call of every layer over `tokens`, continuing `cache`.
    fn call(
        &self,
        tokens: &Tensor,
        backend: &Backend,
        cache: Option<&mut Cache>,
    ) -> Result<Tensor> {
        let (_, t) = tokens.dims2()?;
        let positions = Positions::causal(cache.as_deref().map_or(0, Cache::len), t);
        self.call_at(tokens, backend, &positions, cache)
    }

    /// One attention call of every layer over `tokens` at `positions`.
    fn call_at(
        &self,
        tokens: &Tensor,
        backend: &Backend,
        positions: &Positions,
        mut cache: Option<&mut Cache>,
    ) -> Result<Tensor> {
        let encoding = self.encoding.as_ref();
        let layers = self.blocks.len();
        let call = backend.prepare(encoding, layers, positions, &self.device)?;
        let mut x = self.embed(tokens)?;
        for (l, block) in self.blocks.iter().enumerate() {
            if let (Call::FusedTrain { biases, start }, true) = (&call, self.fused_blocks) {
                if let Some(y) = block.fused(&x, &biases[l], *start, l, &self.cfg)? {
                    x = y;
                    continue;
                }
            }
            let layer_cache = cache.as_deref_mut().map(|c| &mut c.layers[l]);
            let normed = block.ln1.forward(&x)?;
            let h = block
                .attn
                .forward(&normed, &call, l, encoding, layer_cache)?;
            x = block.after_attention(&x, &h)?;
        }
        self.logits(&x)
    }
}
