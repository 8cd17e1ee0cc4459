//! Causal multi-head self-attention with a pluggable positional encoding:
//! softmax(q·kᵀ/√d + b + mask)·v, the bias added after the 1/√d scaling.
//! spec: [attn.logits], [attn.placement], [attn.causal]

use candle_core::{DType, Device, Tensor};

use crate::encodings::PositionEncoding;
use crate::error::{ensure, Result};
use crate::nn::{softmax_last, Linear};
use crate::params::Path;

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

/// `0` where key `j ≤ i`, `−∞` where `j > i`, `[Q, K]`. spec: [attn.causal]
pub fn causal_mask(queries: &[u64], keys: &[u64], device: &Device) -> Result<Tensor> {
    let mut m = Vec::with_capacity(queries.len() * keys.len());
    for &i in queries {
        for &j in keys {
            m.push(if j <= i { 0f32 } else { f32::NEG_INFINITY });
        }
    }
    Ok(Tensor::from_vec(m, (queries.len(), keys.len()), device)?)
}

/// One head's causal attention output at arbitrary positions, the conformance entry point:
/// `q: [Q, d]`, `k, v: [K, d]` row-major, `bias: [Q, K]` row-major; returns `[Q, d_v]`.
/// A query that sees no key is an error, as in the reference.
pub fn causal_head(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    bias: &[f32],
    queries: &[u64],
    keys: &[u64],
    device: &Device,
) -> Result<Vec<f32>> {
    let (nq, nk) = (queries.len(), keys.len());
    ensure(nq > 0 && nk > 0, || "empty position lists".into())?;
    ensure(
        q.len() % nq == 0 && k.len() % nk == 0 && v.len() % nk == 0,
        || "q, k, v lengths are not multiples of the position counts".into(),
    )?;
    let d = q.len() / nq;
    ensure(d > 0 && k.len() == nk * d && bias.len() == nq * nk, || {
        format!(
            "q [{nq}, {d}] does not match k ({} values) or bias ({} values)",
            k.len(),
            bias.len()
        )
    })?;
    if let Some(&i) = queries.iter().find(|&&i| !keys.iter().any(|&j| j <= i)) {
        return Err(crate::Error::Input(format!(
            "query position {i} sees no key (every key is after it)"
        )));
    }
    let dv = v.len() / nk;
    let q = Tensor::from_slice(q, (nq, d), device)?;
    let k = Tensor::from_slice(k, (nk, d), device)?;
    let v = Tensor::from_slice(v, (nk, dv), device)?;
    let b = Tensor::from_slice(bias, (nq, nk), device)?;
    let logits = ((q.matmul(&k.t()?)? / (d as f64).sqrt())? + b)?;
    let logits = (logits + causal_mask(queries, keys, device)?)?;
    let out = softmax_last(&logits)?.matmul(&v)?;
    Ok(out.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?)
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
    /// Projections `q_proj`, `k_proj`, `v_proj`, `o_proj` under `path`.
    pub fn new(
        path: &mut Path<'_>,
        d_model: usize,
        heads: usize,
        std: f64,
        layers: usize,
    ) -> Result<Self> {
        // GPT-2 scales the residual projections by 1/√(2·layers).
        let out_std = std / (2.0 * layers as f64).sqrt();
        Ok(Self {
            q: Linear::normal(&mut path.pp("q_proj"), d_model, d_model, false, std)?,
            k: Linear::normal(&mut path.pp("k_proj"), d_model, d_model, false, std)?,
            v: Linear::normal(&mut path.pp("v_proj"), d_model, d_model, false, std)?,
            o: Linear::normal(&mut path.pp("o_proj"), d_model, d_model, false, out_std)?,
            heads,
            head_dim: d_model / heads,
        })
    }

    fn split(&self, x: &Tensor) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        Ok(x.reshape((b, t, self.heads, self.head_dim))?
            .transpose(1, 2)?
            .contiguous()?)
    }

    /// `x: [B, T, D]` at `positions` (`[T]`), `bias: [H, T, K]`, `mask: [T, K]` where the keys
    /// are the cached positions followed by `positions`.
    pub fn forward(
        &self,
        x: &Tensor,
        positions: &[u64],
        encoding: &dyn PositionEncoding,
        bias: Option<&Tensor>,
        mask: &Tensor,
        cache: Option<&mut LayerCache>,
    ) -> Result<Tensor> {
        let (b, t, d_model) = x.dims3()?;
        let q = encoding.rotate(&self.split(&self.q.forward(x)?)?, positions)?;
        let k = encoding.rotate(&self.split(&self.k.forward(x)?)?, positions)?;
        let v = self.split(&self.v.forward(x)?)?;
        let (k, v) = match cache {
            None => (k, v),
            Some(c) => c.append(k, v)?,
        };
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        let mut logits = (q.matmul(&k.t()?)? * scale)?;
        if let Some(bias) = bias {
            logits = logits.broadcast_add(bias)?;
        }
        logits = logits.broadcast_add(mask)?;
        let out = softmax_last(&logits)?.matmul(&v)?;
        let out = out.transpose(1, 2)?.reshape((b, t, d_model))?;
        self.o.forward(&out)
    }

    /// The fused path: `x: [B, T, D]` at query positions `queries` (`[T]`) against `keys`
    /// (the cached positions followed by `queries`), the bias filled per tile by `plan`
    /// (`None`: no bias) inside [`crate::fast::fused_causal`], so no `[H, T, K]` tensor exists.
    /// With one query this is the decoding step ([`crate::fast::decode`]'s computation): the
    /// bias row costs O(K·H). Inference only (training: [`Self::forward_train_fused`]); additive encodings only (no
    /// rotation).
    /// spec: [attn.logits], [attn.causal]
    pub fn forward_fused(
        &self,
        x: &Tensor,
        queries: &[u64],
        keys: &[u64],
        plan: Option<&dyn crate::fast::BiasPlan>,
        cache: Option<&mut LayerCache>,
    ) -> Result<Tensor> {
        let (b, t, d_model) = x.dims3()?;
        let q = self.split(&self.q.forward(x)?)?;
        let k = self.split(&self.k.forward(x)?)?;
        let v = self.split(&self.v.forward(x)?)?;
        let (k, v) = match cache {
            None => (k, v),
            Some(c) => c.append(k, v)?,
        };
        let nk = k.dims()[2];
        ensure(nk == keys.len() && t == queries.len(), || {
            format!(
                "fused attention: {t} queries and {nk} keys, positions for {} and {}",
                queries.len(),
                keys.len()
            )
        })?;
        let flat = |x: &Tensor| -> Result<Vec<f32>> {
            Ok(x.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?)
        };
        let (q, k, v) = (flat(&q)?, flat(&k)?, flat(&v)?);
        let shape = crate::fast::Shape {
            heads: self.heads,
            queries: t,
            keys: nk,
            head_dim: self.head_dim,
        };
        let (pq, pk) = (
            self.heads * t * self.head_dim,
            self.heads * nk * self.head_dim,
        );
        let mut out = Vec::with_capacity(b * pq);
        for r in 0..b {
            out.extend(crate::fast::fused_causal(
                &q[r * pq..(r + 1) * pq],
                &k[r * pk..(r + 1) * pk],
                &v[r * pk..(r + 1) * pk],
                shape,
                queries,
                keys,
                plan,
            )?);
        }
        let out = Tensor::from_vec(out, (b, self.heads, t, self.head_dim), x.device())?
            .to_dtype(x.dtype())?;
        let out = out.transpose(1, 2)?.reshape((b, t, d_model))?;
        self.o.forward(&out)
    }

    /// [`Self::forward_fused`] on a device (CUDA, feature `cuda`): queries at positions
    /// `q0..q0 + T` against the cached keys and these, the bias from `bias`'s tables
    /// ([`crate::cuda`]). Inference only.
    pub fn forward_fused_device(
        &self,
        x: &Tensor,
        q0: usize,
        bias: &crate::fast::device::DeviceBias,
        cache: Option<&mut LayerCache>,
    ) -> Result<Tensor> {
        #[cfg(not(feature = "cuda"))]
        {
            let _ = (q0, bias, cache);
            Err(crate::Error::Config(format!(
                "the fused attention on {:?} needs the `cuda` feature",
                x.device()
            )))
        }
        #[cfg(feature = "cuda")]
        {
            let (b, t, d_model) = x.dims3()?;
            let q = self.split(&self.q.forward(x)?)?;
            let k = self.split(&self.k.forward(x)?)?;
            let v = self.split(&self.v.forward(x)?)?;
            let (k, v) = match cache {
                None => (k, v),
                Some(c) => c.append(k, v)?,
            };
            let out = crate::cuda::fused_attention(&q, &k, &v, q0, bias.clone())?;
            let out = out.transpose(1, 2)?.reshape((b, t, d_model))?;
            self.o.forward(&out)
        }
    }

    /// The training path through the fused op ([`crate::fused_op`]): `x: [B, T, D]` at
    /// positions `0..T`, `bias` this layer's bias; differentiable with respect to the
    /// projections and the bias parameters, and no `[B, H, T, T]` tensor exists (forward or
    /// backward). Additive encodings only. spec: [attn.logits], [attn.causal]
    pub fn forward_train_fused(
        &self,
        x: &Tensor,
        bias: &crate::fused_op::LayerBias,
    ) -> Result<Tensor> {
        let (b, t, d_model) = x.dims3()?;
        let q = self.split(&self.q.forward(x)?)?;
        let k = self.split(&self.k.forward(x)?)?;
        let v = self.split(&self.v.forward(x)?)?;
        let out = crate::fused_op::fused_attention(&q, &k, &v, bias)?;
        let out = out.transpose(1, 2)?.reshape((b, t, d_model))?;
        self.o.forward(&out)
    }
}
