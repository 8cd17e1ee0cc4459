//! The candle backend: softmax(q·kᵀ/√d + b + mask)·v with plain tensor ops, the bias
//! materialised (per query chunk when a cache is used). Any encoding (rotary ones included),
//! any device, autograd intact: the slow, obvious twin of the fused backends and the path for
//! RoPE. spec: [attn.logits], [attn.placement], [attn.causal]

use candle_core::{DType, Device, Tensor};

use crate::error::{ensure, Error, Result};
use crate::nn::softmax_last;

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

/// Causal attention of `q: [B, H, T, d]` against `k, v: [B, H, K, d]`: the bias `[H, T, K]`
/// (if any) added after the 1/√d scaling, then the mask `[T, K]`; returns `[B, H, T, d]`.
pub fn attend(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    bias: Option<&Tensor>,
    mask: &Tensor,
) -> Result<Tensor> {
    let head_dim = q.dims()[3];
    let scale = 1.0 / (head_dim as f64).sqrt();
    let mut logits = (q.matmul(&k.t()?)? * scale)?;
    if let Some(bias) = bias {
        logits = logits.broadcast_add(bias)?;
    }
    logits = logits.broadcast_add(mask)?;
    Ok(softmax_last(&logits)?.matmul(v)?)
}

/// One head's causal attention output at arbitrary positions, the conformance entry point:
/// `q: [Q, d]`, `k: [K, d]`, `v: [K, d_v]` row-major, `bias: [Q, K]` row-major; returns
/// `[Q, d_v]`. A query that sees no key is an error, as in the reference.
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
        q.len().is_multiple_of(nq) && k.len().is_multiple_of(nk) && v.len().is_multiple_of(nk),
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
        return Err(Error::Input(format!(
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
