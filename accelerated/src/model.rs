//! The decoder-only Transformer: token embedding, pre-LayerNorm blocks (causal self-attention
//! with a pluggable positional encoding, then a GeLU MLP), a final LayerNorm and a tied or
//! untied LM head. State-dict names: `embed.weight`, `layers.{l}.{ln1,attn,ln2,mlp}.…`,
//! `ln_f.…`, `lm_head.weight`.

use candle_core::{Device, Tensor};

use crate::attention::{causal_mask, Attention, LayerCache};
use crate::config::ModelConfig;
use crate::encodings::{self, Grid, PositionEncoding};
use crate::error::{ensure, Result};
use crate::fused::FusedEncoding;
use crate::nn::{LayerNorm, Linear};
use crate::params::{Init, ParamStore};

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
    /// The rest of the block once attention gave `h`: `x + h`, then `+ mlp(ln2(·))`.
    fn after_attention(&self, x: &Tensor, h: &Tensor) -> Result<Tensor> {
        let x = (x + h)?;
        let m = self.fc1.forward(&self.ln2.forward(&x)?)?.gelu_erf()?;
        Ok((&x + self.fc2.forward(&m)?)?)
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
            let attn = Attention::new(&mut p.pp("attn"), d, cfg.n_heads, std, cfg.n_layers)?;
            let ln2 = LayerNorm::new(&mut p.pp("ln2"), d, cfg.layer_norm_eps)?;
            let out_std = std / (2.0 * cfg.n_layers as f64).sqrt();
            let fc1 = Linear::normal(&mut p.pp("mlp.fc1"), d, cfg.d_ff, true, std)?;
            let fc2 = Linear::normal(&mut p.pp("mlp.fc2"), cfg.d_ff, d, true, out_std)?;
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
        })
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
            None => Ok(x.broadcast_matmul(&self.embed.t()?)?),
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

    /// Logits `[B, T, V]` for `tokens` (`[B, T]`, u32).
    ///
    /// Without a cache the whole sequence is one attention call (training). With a cache the
    /// tokens continue the cached sequence at positions `cache.len()..`, processed in query
    /// chunks of at most `chunk` tokens: each layer materialises at most `[B, H, chunk, K]`
    /// logits, never `[H, N, N]`.
    pub fn forward(
        &self,
        tokens: &Tensor,
        cache: Option<&mut Cache>,
        chunk: usize,
    ) -> Result<Tensor> {
        let (_, t) = tokens.dims2()?;
        ensure(t > 0, || "empty token sequence".into())?;
        match cache {
            None => self.forward_chunk(tokens, 0, None),
            Some(cache) => {
                ensure(cache.layers.len() == self.blocks.len(), || {
                    "cache does not belong to this model".into()
                })?;
                let chunk = chunk.max(1);
                let mut outs = Vec::with_capacity(t.div_ceil(chunk));
                let mut s = 0;
                while s < t {
                    let len = chunk.min(t - s);
                    let start = cache.len() as u64;
                    let piece = tokens.narrow(1, s, len)?;
                    outs.push(self.forward_chunk(&piece, start, Some(cache))?);
                    s += len;
                }
                Ok(Tensor::cat(&outs, 1)?)
            }
        }
    }

    /// Logits `[B, T, V]` for `tokens` (`[B, T]`, u32) at positions `0..T` through the fused
    /// attention kernel: the bias of each layer comes from `fused` (compiled once per
    /// evaluation by [`PositionEncoding::tile_bias`]), planned once per call and shared by every
    /// layer that uses the same source (FIRE-S). No `[H, T, T]` tensor is built. Inference only
    /// (training: [`Self::forward_train_fused`]).
    pub fn forward_fused(&self, tokens: &Tensor, fused: &FusedEncoding) -> Result<Tensor> {
        self.forward_fused_cached(tokens, fused, None)
    }

    /// [`Self::forward_fused`] continuing a key/value cache: `tokens` sit at positions
    /// `cache.len()..`, and every query's FIRE normaliser uses its own position. One token at a
    /// time is KV-cache decoding (a bias row costs O(K·H)).
    pub fn forward_fused_cached(
        &self,
        tokens: &Tensor,
        fused: &FusedEncoding,
        mut cache: Option<&mut Cache>,
    ) -> Result<Tensor> {
        let (_, t) = tokens.dims2()?;
        ensure(t > 0, || "empty token sequence".into())?;
        ensure(fused.layers() == self.blocks.len(), || {
            format!(
                "fused encoding has {} layers, the model {}",
                fused.layers(),
                self.blocks.len()
            )
        })?;
        if let Some(c) = cache.as_deref() {
            ensure(c.layers.len() == self.blocks.len(), || {
                "cache does not belong to this model".into()
            })?;
        }
        let start = cache.as_deref().map_or(0, Cache::len) as u64;
        let queries: Vec<u64> = (start..start + t as u64).collect();
        let keys: Vec<u64> = (0..start + t as u64).collect();
        // The CPU kernel takes plans; a CUDA device takes the bias as tables.
        let plans = if self.device.is_cpu() {
            Some(fused.plans(&queries, &keys)?)
        } else {
            None
        };
        let device_biases = match plans {
            Some(_) => Vec::new(),
            None => fused.device_biases(&queries, keys.len())?,
        };
        let mut x = self.embed(tokens)?;
        for (l, block) in self.blocks.iter().enumerate() {
            let layer_cache = cache.as_deref_mut().map(|c| &mut c.layers[l]);
            let normed = block.ln1.forward(&x)?;
            let h = match &plans {
                Some(plans) => block.attn.forward_fused(
                    &normed,
                    &queries,
                    &keys,
                    plans.layer(l),
                    layer_cache,
                )?,
                None => block.attn.forward_fused_device(
                    &normed,
                    start as usize,
                    &device_biases[l],
                    layer_cache,
                )?,
            };
            x = block.after_attention(&x, &h)?;
        }
        self.logits(&x)
    }

    /// Logits `[B, T, V]` for training through the fused attention op with a backward pass
    /// ([`crate::fused_op`]): positions `0..T`, autograd intact (FIRE's `c` and
    /// `L_multiplier` included), and neither the forward nor the backward builds an
    /// `[B, H, T, T]` tensor, so a step at thousands of tokens fits where the materialised
    /// path's scores would not. CPU, additive encodings (everything but RoPE).
    pub fn forward_train_fused(&self, tokens: &Tensor) -> Result<Tensor> {
        let (_, t) = tokens.dims2()?;
        ensure(t > 0, || "empty token sequence".into())?;
        let biases = self
            .encoding
            .train_bias(self.blocks.len(), t, &self.device)?
            .ok_or_else(|| {
                crate::Error::Config(format!(
                    "fused training attention needs an additive encoding; `{}` rotates queries \
                     and keys (use the materialised path)",
                    self.encoding.name()
                ))
            })?;
        let mut x = self.embed(tokens)?;
        for (block, bias) in self.blocks.iter().zip(&biases) {
            let h = block
                .attn
                .forward_train_fused(&block.ln1.forward(&x)?, bias)?;
            x = block.after_attention(&x, &h)?;
        }
        self.logits(&x)
    }

    /// Whether [`Self::forward_train_fused`] applies: an additive encoding on the CPU.
    pub fn trains_fused(&self) -> bool {
        self.device.is_cpu()
            && matches!(
                self.encoding.train_bias(self.blocks.len(), 1, &self.device),
                Ok(Some(_))
            )
    }

    /// This model's encoding compiled for the fused kernel (tables for distances below
    /// `capacity`), or `None` when the fused path does not apply: a rotary encoding, a device
    /// other than the CPU or (with the `cuda` feature) CUDA, or on CUDA a GeLU FIRE.
    pub fn fused_encoding(&self, capacity: usize) -> Result<Option<FusedEncoding>> {
        let device_kernel = cfg!(feature = "cuda") && self.device.is_cuda();
        if !self.device.is_cpu() && !device_kernel {
            return Ok(None);
        }
        Ok(self
            .encoding
            .tile_bias(self.blocks.len(), capacity)?
            .filter(|f| self.device.is_cpu() || f.device_ready()))
    }

    fn forward_chunk(
        &self,
        tokens: &Tensor,
        start: u64,
        mut cache: Option<&mut Cache>,
    ) -> Result<Tensor> {
        let (_, t) = tokens.dims2()?;
        let grid = Grid::causal(start, t as u64, &self.device)?;
        let biases = self.encoding.biases(&grid, self.blocks.len())?;
        let mask = causal_mask(&grid.queries, &grid.keys, &self.device)?;
        let mut x = self.embed(tokens)?;
        for (l, block) in self.blocks.iter().enumerate() {
            let layer_cache = cache.as_deref_mut().map(|c| &mut c.layers[l]);
            let h = block.attn.forward(
                &block.ln1.forward(&x)?,
                &grid.queries,
                self.encoding.as_ref(),
                biases[l].as_ref(),
                &mask,
                layer_cache,
            )?;
            x = block.after_attention(&x, &h)?;
        }
        self.logits(&x)
    }
}
