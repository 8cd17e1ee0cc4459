//! The fused training backend (CPU, f32): attention with an on-the-fly bias as a candle custom
//! op with a backward pass, so training at long length never builds an `[B, H, N, N]` tensor.
//!
//! `softmax(q·kᵀ/√d + b + causal)·v` over positions `s..s + N` (`s = 0` except when training
//! with randomised position offsets), with the bias filled per tile
//! ([`fire_kernels::fused_causal_lse`]) and the gradients recomputed per tile
//! ([`fire_kernels::backward`]). What autograd sees is one op of three inputs:
//!
//! - `q: [B, H, N, d]`,
//! - `kv: [B, H, N, 2d]` (keys and values side by side; a custom op has at most three inputs),
//! - the bias parameters as one flat tensor ([`LayerBias`]): FIRE's θ, `c` and `m` packed in
//!   [grad.layout]'s order, or a distance table `[H, N]` computed by the encoding's own
//!   differentiable code. Candle's autograd carries the op's gradient for that tensor back to
//!   the encoding's variables, so FIRE's `c` and `L_multiplier` train as they do on the
//!   materialised path.
//!
//! Memory the graph keeps: the inputs, the output and the `[B, H, N]` log-sum-exp — O(N·d).
//! CPU only (the kernels are Rust); the candle backend stays the choice on CUDA.
//! spec: [attn.logits], [attn.causal], [grad.vjp]

use std::sync::{Arc, Mutex};

use candle_core::{CpuStorage, CustomOp3, DType, Layout, Shape, Tensor};
use fire_kernels::{self as kernels, PackedFire, Shape as KernelShape};

use crate::encodings::LayerBias;
use crate::error::{Error, Result};
use crate::ops::slice;

/// What the op knows besides its tensors.
#[derive(Debug, Clone)]
pub(crate) enum Kind {
    None,
    Fire(PackedFire),
    Table { heads: usize },
}

/// The op; one instance per call (it keeps that call's log-sum-exp for the backward pass).
#[derive(Debug)]
struct FusedAttention {
    kind: Kind,
    lse: Mutex<Option<Vec<f32>>>,
    /// The first position: the op covers positions `start..start + N`.
    start: u64,
}

/// `softmax(q·kᵀ/√d + b + causal)·v` for `q, k, v: [B, H, N, d]` (f32, CPU) at positions
/// `start..start + N` (queries and keys alike; `start > 0` is training with randomised position
/// offsets: the causal pattern is the same, FIRE's normaliser sees the shifted query positions,
/// distance-only biases do not change), differentiable with respect to `q`, `k`, `v` and the
/// bias parameters. `layer` only names the layer in errors.
pub fn attend(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    bias: &LayerBias,
    start: u64,
    layer: usize,
) -> Result<Tensor> {
    let (b, h, n, d) = q.dims4()?;
    for (name, t) in [("k", k), ("v", v)] {
        if t.dims() != [b, h, n, d] {
            return Err(Error::Input(format!(
                "fused attention: {name} is {:?}, q is {:?}",
                t.dims(),
                q.dims()
            )));
        }
    }
    if q.dtype() != DType::F32 || !q.device().is_cpu() {
        return Err(Error::Config(format!(
            "fused training attention runs in f32 on the CPU (got {:?} on {:?}); use the \
             materialised path",
            q.dtype(),
            q.device()
        )));
    }
    let kv = Tensor::cat(&[k, v], 3)?.contiguous()?;
    let (kind, params) = bias_input(bias, h, n, q.device(), layer)?;
    let op = FusedAttention {
        kind,
        lse: Mutex::new(None),
        start,
    };
    Ok(q.contiguous()?
        .apply_op3_arc(&kv, &params.contiguous()?, Arc::new(Box::new(op)))?)
}

/// What the op knows of `bias` and the tensor it differentiates for it: FIRE's packed
/// parameters, a `[H, ≥ N]` distance table, or a one-element placeholder for no bias.
pub(crate) fn bias_input(
    bias: &LayerBias,
    h: usize,
    n: usize,
    device: &candle_core::Device,
    layer: usize,
) -> Result<(Kind, Tensor)> {
    Ok(match bias {
        LayerBias::None => (Kind::None, Tensor::zeros(1, DType::F32, device)?),
        LayerBias::Fire { layout, params } => {
            check_fire_finite(layout, params, layer)?;
            (Kind::Fire(layout.clone()), params.clone())
        }
        LayerBias::Table { table } => {
            let (th, tn) = table.dims2()?;
            if th != h || tn < n {
                return Err(Error::Input(format!(
                    "fused attention: distance table [{th}, {tn}] for {h} heads and {n} positions"
                )));
            }
            (Kind::Table { heads: h }, table.clone())
        }
    })
}

/// Refuses FIRE parameters holding a NaN or an infinity before the op sees them, naming the
/// parameter as the model does: inside the op the kernels only know "MLP parameter", and the
/// message would reach the user wrapped in candle's.
fn check_fire_finite(layout: &PackedFire, params: &Tensor, layer: usize) -> Result<()> {
    let Some(bad) = crate::train::finite::first_nonfinite([("FIRE parameters", params)])? else {
        return Ok(());
    };
    let theta = layout.packed_len().saturating_sub(2);
    let value = crate::train::finite::words(bad.value);
    let what = match bad.index.checked_sub(theta) {
        None => format!(
            "MLP weights of layer {layer} are not finite ({value} at element {} of f_θ's \
             weights and biases)",
            bad.index
        ),
        Some(0) => format!("c of layer {layer} is not finite ({value})"),
        Some(_) => format!("L_multiplier of layer {layer} is not finite ({value})"),
    };
    Err(Error::Input(format!(
        "FIRE {what}: the weights diverged or were damaged"
    )))
}

fn msg(e: impl std::fmt::Display) -> candle_core::Error {
    candle_core::Error::Msg(format!("fused attention: {e}"))
}

/// `[B, H, N, 2d]` → `(k, v)`, each `[B, H, N, d]`.
fn split_kv(kv: &[f32], d: usize) -> (Vec<f32>, Vec<f32>) {
    let mut k = Vec::with_capacity(kv.len() / 2);
    let mut v = Vec::with_capacity(kv.len() / 2);
    for row in kv.chunks_exact(2 * d) {
        k.extend_from_slice(&row[..d]);
        v.extend_from_slice(&row[d..]);
    }
    (k, v)
}

/// The inverse of [`split_kv`].
fn join_kv(k: &[f32], v: &[f32], d: usize) -> Vec<f32> {
    let mut kv = Vec::with_capacity(2 * k.len());
    for (k, v) in k.chunks_exact(d).zip(v.chunks_exact(d)) {
        kv.extend_from_slice(k);
        kv.extend_from_slice(v);
    }
    kv
}

/// A bias source built from the op's parameter values.
pub(crate) enum Source {
    None,
    Fire(kernels::FireBias),
    Table(kernels::DistanceTable),
}

impl Kind {
    /// The bias source for these parameter values and `n` positions.
    pub(crate) fn source(&self, params: &[f32], n: usize) -> kernels::Result<Source> {
        Ok(match self {
            Kind::None => Source::None,
            Kind::Fire(layout) => Source::Fire(layout.build(params, n)?),
            Kind::Table { heads } => {
                let cap = params.len() / heads.max(&1);
                Source::Table(kernels::DistanceTable::new(*heads, cap, params.to_vec())?)
            }
        })
    }
}

impl Source {
    /// The plan (with its gradient) over `positions` as queries and keys, if there is a bias.
    pub(crate) fn grad_plan<'a>(
        &'a self,
        positions: &'a [u64],
    ) -> kernels::Result<Option<Box<dyn kernels::GradPlan + 'a>>> {
        Ok(match self {
            Source::None => None,
            Source::Fire(f) => Some(f.grad_plan(positions, positions)?),
            Source::Table(t) => Some(t.grad_plan(positions, positions)?),
        })
    }
}

impl FusedAttention {
    /// Forward over every batch row; returns `(out, lse)`.
    fn forward(
        &self,
        q: &[f32],
        kv: &[f32],
        params: &[f32],
        dims: (usize, usize, usize, usize),
    ) -> kernels::Result<(Vec<f32>, Vec<f32>)> {
        let (b, h, n, d) = dims;
        let (k, v) = split_kv(kv, d);
        let positions: Vec<u64> = (self.start..self.start + n as u64).collect();
        let source = self.kind.source(params, n)?;
        let plan = source.grad_plan(&positions)?;
        let shape = KernelShape {
            heads: h,
            queries: n,
            keys: n,
            head_dim: d,
        };
        kernels::fused_causal_lse_batch(
            b,
            q,
            &k,
            &v,
            shape,
            &positions,
            &positions,
            plan.as_deref().map(|p| p.as_bias()),
        )
    }
}

fn values(t: &Tensor) -> candle_core::Result<Vec<f32>> {
    t.flatten_all()?.to_vec1::<f32>()
}

impl CustomOp3 for FusedAttention {
    fn name(&self) -> &'static str {
        "fused-attention-with-bias"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (b, h, n, d) = l1.shape().dims4()?;
        if l2.shape().dims() != [b, h, n, 2 * d] {
            candle_core::bail!(
                "fused attention: kv is {:?}, q is {:?}",
                l2.shape(),
                l1.shape()
            );
        }
        let q = slice(s1, l1, "fused attention: q")?;
        let kv = slice(s2, l2, "fused attention: kv")?;
        let params = slice(s3, l3, "fused attention: bias parameters")?;
        let (out, lse) = self.forward(q, kv, params, (b, h, n, d)).map_err(msg)?;
        *self.lse.lock().map_err(msg)? = Some(lse);
        Ok((CpuStorage::F32(out), Shape::from((b, h, n, d))))
    }

    fn bwd(
        &self,
        q: &Tensor,
        kv: &Tensor,
        params: &Tensor,
        res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (b, h, n, d) = q.dims4()?;
        let (qv, kvv, pv, out, dout) = (
            values(q)?,
            values(kv)?,
            values(params)?,
            values(res)?,
            values(grad_res)?,
        );
        let saved = self.lse.lock().map_err(msg)?.clone();
        let lse = match saved {
            Some(l) => l,
            None => self.forward(&qv, &kvv, &pv, (b, h, n, d)).map_err(msg)?.1,
        };
        let (k, v) = split_kv(&kvv, d);
        let positions: Vec<u64> = (self.start..self.start + n as u64).collect();
        let source = self.kind.source(&pv, n).map_err(msg)?;
        let plan = source.grad_plan(&positions).map_err(msg)?;
        let shape = KernelShape {
            heads: h,
            queries: n,
            keys: n,
            head_dim: d,
        };
        let g = kernels::fused_causal_backward(
            b,
            &qv,
            &k,
            &v,
            &out,
            &lse,
            &dout,
            shape,
            &positions,
            &positions,
            plan.as_deref(),
        )
        .map_err(msg)?;
        let dev = q.device();
        let dq = Tensor::from_vec(g.dq, (b, h, n, d), dev)?;
        let dkv = Tensor::from_vec(join_kv(&g.dk, &g.dv, d), (b, h, n, 2 * d), dev)?;
        let dparams = match self.kind {
            Kind::None => None,
            _ => {
                let flat: Vec<f32> = g.dparams.iter().map(|&x| x as f32).collect();
                Some(Tensor::from_vec(flat, params.shape(), dev)?)
            }
        };
        Ok((Some(dq), Some(dkv), dparams))
    }
}
