//! The whole pre-LayerNorm Transformer block as one op with its backward pass, for training on
//! the CPU with the fused attention:
//!
//! ```text
//! h₁ = LN₁(x)            q, k, v = h₁·W_qᵀ, h₁·W_kᵀ, h₁·W_vᵀ     a = attention(q, k, v; bias)
//! x₁ = x + a·W_oᵀ        h₂ = LN₂(x₁)     z = h₂·W₁ᵀ + b₁     y = x₁ + gelu(z)·W₂ᵀ + b₂
//! ```
//!
//! The same maths as the block built from candle ops ([`crate::model`]), which stays the slow
//! twin (`tests/fused_block.rs` holds the two to float noise in the output and in every
//! gradient). Why one op: through candle's autograd, a training step of the paper's small
//! models spent about two thirds of its time outside the arithmetic — each gradient is
//! accumulated as `zeros + grad` into a fresh tensor, each transpose is a strided copy, each
//! bias gradient a single-threaded reduction — so it ran at a third of PyTorch's speed with the
//! same GEMM kernels. Here the products go straight to [`fire_kernels::gemm`] on slices, the
//! row-wise parts (LayerNorm, GeLU, residuals) are single passes, the attention is
//! [`fire_kernels::fused_causal_lse`] and its backward, and autograd sees one node per block.
//!
//! Inputs: `x: [B, T, D]`; the block's parameters flattened into one vector in the order [`block`]
//! documents (the model concatenates its variables, and candle's `cat` carries each slice of the
//! gradient back to its variable); the attention bias's parameters as in
//! [`crate::attention::fused_train`]. The activations the backward pass needs are kept inside
//! the op between the passes (as PyTorch's autograd keeps them): about `(8·D + 2·F)·4` bytes per
//! token. spec: [attn.logits], [attn.causal], [grad.vjp]

use std::sync::{Arc, Mutex};

use candle_core::{CpuStorage, CustomOp3, Layout, Shape, Tensor};
use fire_kernels::gemm::{matmul, Mat};
use fire_kernels::Shape as KernelShape;
use fire_kernels::{BackwardInputs, MergedRows};
use rayon::prelude::*;

use super::gelu::{bias_gelu_into, gelu_backward_rows};
use super::scratch::Scratch;
use super::{layer_norm, rows_per_task, slice, sum_partials, with_f32};
use crate::attention::fused_train::{bias_input, Kind};
use crate::encodings::LayerBias;
use crate::error::Result;

/// The sizes of a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dims {
    /// `D`.
    pub d_model: usize,
    /// `H` (dividing `D`).
    pub heads: usize,
    /// `F`, the MLP's hidden width.
    pub d_ff: usize,
}

impl Dims {
    /// The length of the flat parameter vector.
    pub fn params(&self) -> usize {
        let (d, f) = (self.d_model, self.d_ff);
        2 * d + 4 * d * d + 2 * d + f * d + f + d * f + d
    }
}

/// The block's parameters as slices of the flat vector, in its order: LN₁ γ, β `[D]`;
/// `W_q, W_k, W_v` `[D, D]` each, adjacent, so they read as one `W_qkv: [3D, D]`; `W_o`
/// `[D, D]`; LN₂ γ, β; `W₁: [F, D]`, `b₁: [F]`; `W₂: [D, F]`, `b₂: [D]` (weights `[out, in]`,
/// PyTorch's `nn.Linear` layout).
struct Params<'a> {
    ln1_w: &'a [f32],
    ln1_b: &'a [f32],
    wqkv: &'a [f32],
    wo: &'a [f32],
    ln2_w: &'a [f32],
    ln2_b: &'a [f32],
    w1: &'a [f32],
    b1: &'a [f32],
    w2: &'a [f32],
    b2: &'a [f32],
}

impl<'a> Params<'a> {
    fn split(flat: &'a [f32], dims: Dims) -> candle_core::Result<Self> {
        if flat.len() != dims.params() {
            candle_core::bail!(
                "transformer block: {} parameters for {dims:?}, which needs {}",
                flat.len(),
                dims.params()
            );
        }
        let (d, f) = (dims.d_model, dims.d_ff);
        let mut rest = flat;
        let mut take = |n: usize| {
            let (head, tail) = rest.split_at(n);
            rest = tail;
            head
        };
        Ok(Self {
            ln1_w: take(d),
            ln1_b: take(d),
            wqkv: take(3 * d * d),
            wo: take(d * d),
            ln2_w: take(d),
            ln2_b: take(d),
            w1: take(f * d),
            b1: take(f),
            w2: take(d * f),
            b2: take(d),
        })
    }
}

/// What the backward pass needs from the forward pass (`N = B·T` rows).
pub(crate) struct Saved {
    h1: Scratch,
    /// `[B, H, T, D/H]` each.
    q: Scratch,
    k: Scratch,
    v: Scratch,
    out: Vec<f32>,
    lse: Vec<f32>,
    /// The heads merged back: `[N, D]`.
    a: Scratch,
    x1: Scratch,
    h2: Scratch,
    /// `[N, F]`.
    z: Scratch,
    f: Scratch,
}

/// The op; one instance per call (it keeps that call's activations for the backward pass).
#[derive(Debug)]
struct Block {
    dims: Dims,
    eps: f32,
    kind: Kind,
    start: u64,
    saved: Mutex<Option<Saved>>,
}

impl std::fmt::Debug for Saved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Saved")
    }
}

/// The block applied to `x: [B, T, D]` at positions `start..start + T`, differentiable in `x`,
/// `params` and the bias's parameters. `params` holds [`Dims::params`] values in this order:
/// LN₁ γ, β `[D]`; `W_q, W_k, W_v` `[D, D]` each; `W_o` `[D, D]`; LN₂ γ, β; `W₁: [F, D]`,
/// `b₁: [F]`; `W₂: [D, F]`, `b₂: [D]` (weights `[out, in]`). `eps` is both LayerNorms';
/// `layer` only names the layer in errors.
pub fn block(
    x: &Tensor,
    params: &Tensor,
    bias: &LayerBias,
    dims: Dims,
    eps: f64,
    start: u64,
    layer: usize,
) -> Result<Tensor> {
    let (_, t, d) = x.dims3()?;
    if d != dims.d_model || dims.heads == 0 || d % dims.heads != 0 {
        return Err(crate::error::Error::Input(format!(
            "transformer block: x is {:?} for {dims:?}",
            x.dims()
        )));
    }
    let (Pass(op), bias_params) = Pass::new(bias, dims, eps, start, t, x.device(), layer)?;
    Ok(x.contiguous()?.apply_op3_arc(
        &params.contiguous()?,
        &bias_params.contiguous()?,
        Arc::new(Box::new(op)),
    )?)
}

/// The block's two passes on slices, for a training step that runs outside candle's autograd
/// ([`crate::model::Model::fused_step`]): the same arithmetic as the op [`block`] builds.
pub(crate) struct Pass(Block);

impl Pass {
    /// The passes of layer `layer` (of `t` positions from `start`) and the bias parameters
    /// they read (a candle tensor, so that their gradient can be carried on to the encoding's
    /// own parameters).
    pub(crate) fn new(
        bias: &LayerBias,
        dims: Dims,
        eps: f64,
        start: u64,
        t: usize,
        device: &candle_core::Device,
        layer: usize,
    ) -> Result<(Self, Tensor)> {
        if dims.heads == 0 || !dims.d_model.is_multiple_of(dims.heads) {
            return Err(crate::error::Error::Input(format!(
                "transformer block: {dims:?}"
            )));
        }
        let (kind, bias_params) = bias_input(bias, dims.heads, t, device, layer)?;
        let op = Block {
            dims,
            eps: eps as f32,
            kind,
            start,
            saved: Mutex::new(None),
        };
        Ok((Self(op), bias_params))
    }

    /// `y` for `x: [B·T, D]` and what the backward pass keeps.
    pub(crate) fn forward(
        &self,
        x: &[f32],
        params: &[f32],
        bias: &[f32],
        (b, t): (usize, usize),
    ) -> candle_core::Result<(Scratch, Saved)> {
        let p = Params::split(params, self.0.dims)?;
        if x.len() != b * t * self.0.dims.d_model {
            candle_core::bail!("transformer block: {} inputs for {b} x {t} rows", x.len());
        }
        crate::timing::time("block forward", || self.0.forward(x, &p, bias, (b, t)))
    }

    /// `(dx, dparams, dbias)` for the output's cotangent `dy`.
    pub(crate) fn backward(
        &self,
        x: &[f32],
        params: &[f32],
        bias: &[f32],
        saved: &Saved,
        dy: &[f32],
        (b, t): (usize, usize),
    ) -> candle_core::Result<(Scratch, Vec<f32>, Vec<f64>)> {
        let p = Params::split(params, self.0.dims)?;
        if dy.len() != x.len() {
            candle_core::bail!(
                "transformer block: gradient {} for {} values",
                dy.len(),
                x.len()
            );
        }
        crate::timing::time("block backward", || {
            self.0.backward(x, &p, bias, saved, dy, (b, t))
        })
    }

    /// Whether the bias has parameters (a gradient to carry on).
    pub(crate) fn has_bias(&self) -> bool {
        !matches!(self.0.kind, Kind::None)
    }
}

fn msg(e: impl std::fmt::Display) -> candle_core::Error {
    candle_core::Error::Msg(format!("transformer block: {e}"))
}

/// Rows `[N, width]` (columns `offset..offset + D` of each) → heads `[B, H, T, D/H]`, row by
/// row: each source row is read once, in order, and written to the `H` heads' rows as `H`
/// sequential streams (see [`from_heads`] for why).
fn to_heads(src: &[f32], width: usize, offset: usize, t: usize, heads: usize, d: usize) -> Scratch {
    let dh = d / heads;
    // Every row of every head is copied in: written in full.
    let mut dst = Scratch::overwritten(src.len() / width * d);
    dst.par_chunks_mut(heads * t * dh)
        .zip(src.par_chunks(t * width))
        .for_each(|(dst, src)| {
            for (i, row) in src.chunks_exact(width).enumerate() {
                for (h, part) in row[offset..offset + d].chunks_exact(dh).enumerate() {
                    let at = (h * t + i) * dh;
                    dst[at..at + dh].copy_from_slice(part);
                }
            }
        });
    dst
}

/// The inverse of [`to_heads`]: heads `[B, H, T, D/H]` into columns `offset..offset + D` of
/// rows `[N, width]`, row by row: each destination row's `D` columns are written in order,
/// the heads read as `H` sequential streams. Head by head instead, every destination row is
/// visited `H` times, `width` floats apart, and at the larger model's `[2048, 768]` gradient
/// of `q, k, v` a buffer that outgrows the cache has its lines fetched again for each head:
/// `fire-lm train` at d 256, 6 layers, 4 × 512 (3 runs each), these copies of the backward
/// pass 8.0–11.0 → 7.1–7.7 ms a step (at d 128, 16 × 128: 2.3–2.6 → 1.6–2.0 ms).
fn from_heads(
    src: &[f32],
    dst: &mut [f32],
    width: usize,
    offset: usize,
    t: usize,
    heads: usize,
    d: usize,
) {
    let dh = d / heads;
    dst.par_chunks_mut(t * width)
        .zip(src.par_chunks(heads * t * dh))
        .for_each(|(dst, src)| {
            for (i, row) in dst.chunks_exact_mut(width).enumerate() {
                for (h, part) in row[offset..offset + d].chunks_exact_mut(dh).enumerate() {
                    let at = (h * t + i) * dh;
                    part.copy_from_slice(&src[at..at + dh]);
                }
            }
        });
}

/// Σ over rows of `x` (rows of `width`), in task order so the result does not depend on the
/// thread count.
fn column_sums(x: &[f32], width: usize) -> Vec<f32> {
    let partials = x
        .par_chunks(rows_per_task(width) * width)
        .map(|c| {
            let mut s = vec![0f32; width];
            for r in c.chunks_exact(width) {
                s.iter_mut().zip(r).for_each(|(a, b)| *a += b);
            }
            s
        })
        .collect();
    sum_partials(partials, width)
}

fn mat(data: &[f32], rows: usize, cols: usize) -> candle_core::Result<Mat<'_>> {
    Mat::row_major(data, rows, cols).map_err(msg)
}

/// `dst (+)= a·b`.
fn mm(dst: &mut [f32], a: Mat<'_>, b: Mat<'_>, accumulate: bool) -> candle_core::Result<()> {
    matmul(dst, a, b, accumulate).map_err(msg)
}

impl Block {
    fn attention_shape(&self, t: usize) -> KernelShape {
        KernelShape {
            heads: self.dims.heads,
            queries: t,
            keys: t,
            head_dim: self.dims.d_model / self.dims.heads,
        }
    }

    fn positions(&self, t: usize) -> Vec<u64> {
        (self.start..self.start + t as u64).collect()
    }

    /// The forward pass over `x: [B·T, D]`: the output and what the backward pass keeps.
    fn forward(
        &self,
        x: &[f32],
        p: &Params<'_>,
        bias: &[f32],
        (b, t): (usize, usize),
    ) -> candle_core::Result<(Scratch, Saved)> {
        let Dims {
            d_model: d,
            heads,
            d_ff: f,
        } = self.dims;
        let n = b * t;
        // Every buffer below is written in full before it is read (matrix products without
        // accumulation, row-wise passes, copies), hence `Scratch::overwritten`.
        let mut h1 = Scratch::overwritten(n * d);
        crate::timing::time("block forward: LayerNorms", || {
            layer_norm::forward(x, p.ln1_w, p.ln1_b, self.eps, &mut h1)
        });
        let mut qkv = Scratch::overwritten(n * 3 * d);
        crate::timing::time("block forward: products", || {
            mm(&mut qkv, mat(&h1, n, d)?, mat(p.wqkv, 3 * d, d)?.t(), false)
        })?;
        let (q, k, v) = crate::timing::time("block forward: head-layout copies", || {
            (
                to_heads(&qkv, 3 * d, 0, t, heads, d),
                to_heads(&qkv, 3 * d, d, t, heads, d),
                to_heads(&qkv, 3 * d, 2 * d, t, heads, d),
            )
        });
        drop(qkv);
        let attention_start = std::time::Instant::now();
        let positions = self.positions(t);
        let source = self.kind.source(bias, t).map_err(msg)?;
        let plan = source.grad_plan(&positions).map_err(msg)?;
        let (out, lse) = fire_kernels::fused_causal_lse_batch(
            b,
            &q,
            &k,
            &v,
            self.attention_shape(t),
            &positions,
            &positions,
            plan.as_deref().map(|p| p.as_bias()),
        )
        .map_err(msg)?;
        crate::timing::add(
            "block forward: attention",
            attention_start.elapsed().as_secs_f64(),
        );
        let mut a = Scratch::overwritten(n * d);
        crate::timing::time("block forward: head-layout copies", || {
            from_heads(&out, &mut a, d, 0, t, heads, d)
        });
        let mut x1 = Scratch::copy_of(x);
        crate::timing::time("block forward: products", || {
            mm(&mut x1, mat(&a, n, d)?, mat(p.wo, d, d)?.t(), true)
        })?;
        let mut h2 = Scratch::overwritten(n * d);
        crate::timing::time("block forward: LayerNorms", || {
            layer_norm::forward(&x1, p.ln2_w, p.ln2_b, self.eps, &mut h2)
        });
        let mut z = Scratch::overwritten(n * f);
        crate::timing::time("block forward: products", || {
            mm(&mut z, mat(&h2, n, d)?, mat(p.w1, f, d)?.t(), false)
        })?;
        // z += b₁ (kept for the backward pass) and g = gelu(z), in one pass.
        let mut g = Scratch::overwritten(n * f);
        crate::timing::time("block forward: bias + GeLU", || {
            g.par_chunks_mut(rows_per_task(f) * f)
                .zip(z.par_chunks_mut(rows_per_task(f) * f))
                .for_each(|(g, z)| bias_gelu_into(z, p.b1, g))
        });
        // Written in full: x₁ + b₂ row by row, then the product accumulates into it.
        let mut y = Scratch::overwritten(n * d);
        y.par_chunks_mut(rows_per_task(d) * d)
            .zip(x1.par_chunks(rows_per_task(d) * d))
            .for_each(|(y, x1)| {
                for (y, x1) in y.chunks_exact_mut(d).zip(x1.chunks_exact(d)) {
                    for ((y, &x1), &b2) in y.iter_mut().zip(x1).zip(p.b2) {
                        *y = x1 + b2;
                    }
                }
            });
        crate::timing::time("block forward: products", || {
            mm(&mut y, mat(&g, n, f)?, mat(p.w2, d, f)?.t(), true)
        })?;
        let saved = Saved {
            h1,
            q,
            k,
            v,
            out,
            lse,
            a,
            x1,
            h2,
            z,
            f: g,
        };
        Ok((y, saved))
    }

    /// The backward pass: `(dx, dparams, dbias)` for the output's cotangent `dy`.
    fn backward(
        &self,
        x: &[f32],
        p: &Params<'_>,
        bias: &[f32],
        s: &Saved,
        dy: &[f32],
        (b, t): (usize, usize),
    ) -> candle_core::Result<(Scratch, Vec<f32>, Vec<f64>)> {
        let Dims {
            d_model: d,
            heads,
            d_ff: f,
        } = self.dims;
        let n = b * t;
        // The MLP: y = x₁ + gelu(z)·W₂ᵀ + b₂.
        let db2 = crate::timing::time("block backward: bias + GeLU", || column_sums(dy, d));
        let mut dw2 = Scratch::overwritten(d * f);
        crate::timing::time("block backward: products", || {
            mm(&mut dw2, mat(dy, n, d)?.t(), mat(&s.f, n, f)?, false)
        })?;
        let mut dz = Scratch::overwritten(n * f);
        crate::timing::time("block backward: products", || {
            mm(&mut dz, mat(dy, n, d)?, mat(p.w2, d, f)?, false)
        })?;
        let chunk = rows_per_task(f) * f;
        let db1 = crate::timing::time("block backward: bias + GeLU", || {
            let partials = dz
                .par_chunks_mut(chunk)
                .zip(s.z.par_chunks(chunk))
                .map(|(dz, z)| {
                    let mut db = vec![0f32; f];
                    gelu_backward_rows(z, dz, &mut db);
                    db
                })
                .collect();
            sum_partials(partials, f)
        });
        let mut dw1 = Scratch::overwritten(f * d);
        crate::timing::time("block backward: products", || {
            mm(&mut dw1, mat(&dz, n, f)?.t(), mat(&s.h2, n, d)?, false)
        })?;
        let mut dh2 = Scratch::overwritten(n * d);
        crate::timing::time("block backward: products", || {
            mm(&mut dh2, mat(&dz, n, f)?, mat(p.w1, f, d)?, false)
        })?;
        drop(dz);
        let (dx1, dln2_w, dln2_b) = crate::timing::time("block backward: LayerNorms", || {
            layer_norm::backward_plus(&s.x1, p.ln2_w, &dh2, Some(dy), d, self.eps)
        })?;
        // The attention: x₁ = x + a·W_oᵀ.
        let mut dwo = Scratch::overwritten(d * d);
        crate::timing::time("block backward: products", || {
            mm(&mut dwo, mat(&dx1, n, d)?.t(), mat(&s.a, n, d)?, false)
        })?;
        let mut da = Scratch::overwritten(n * d);
        crate::timing::time("block backward: products", || {
            mm(&mut da, mat(&dx1, n, d)?, mat(p.wo, d, d)?, false)
        })?;
        let dout = crate::timing::time("block backward: head-layout copies", || {
            to_heads(&da, d, 0, t, heads, d)
        });
        drop(da);
        let attention_start = std::time::Instant::now();
        let positions = self.positions(t);
        let source = self.kind.source(bias, t).map_err(msg)?;
        let plan = source.grad_plan(&positions).map_err(msg)?;
        // dq, dk, dv side by side in rows, as the fused projection's product wants them: every
        // column of every row is written.
        let mut dqkv = Scratch::overwritten(n * 3 * d);
        let dbias = fire_kernels::fused_causal_backward_into_rows(
            BackwardInputs {
                batch: b,
                q: &s.q,
                k: &s.k,
                v: &s.v,
                out: &s.out,
                lse: &s.lse,
                dout: &dout,
                shape: self.attention_shape(t),
                queries: &positions,
                keys: &positions,
                bias: plan.as_deref(),
            },
            MergedRows {
                rows: &mut dqkv,
                width: 3 * d,
                offsets: [0, d, 2 * d],
            },
        )
        .map_err(msg)?;
        crate::timing::add(
            "block backward: attention",
            attention_start.elapsed().as_secs_f64(),
        );
        let mut dwqkv = Scratch::overwritten(3 * d * d);
        crate::timing::time("block backward: products", || {
            mm(
                &mut dwqkv,
                mat(&dqkv, n, 3 * d)?.t(),
                mat(&s.h1, n, d)?,
                false,
            )
        })?;
        let mut dh1 = Scratch::overwritten(n * d);
        crate::timing::time("block backward: products", || {
            mm(
                &mut dh1,
                mat(&dqkv, n, 3 * d)?,
                mat(p.wqkv, 3 * d, d)?,
                false,
            )
        })?;
        drop(dqkv);
        let (dx, dln1_w, dln1_b) = crate::timing::time("block backward: LayerNorms", || {
            layer_norm::backward_plus(x, p.ln1_w, &dh1, Some(&dx1), d, self.eps)
        })?;
        let mut dparams = Vec::with_capacity(self.dims.params());
        for part in [
            &dln1_w[..],
            &dln1_b,
            &dwqkv,
            &dwo,
            &dln2_w,
            &dln2_b,
            &dw1,
            &db1,
            &dw2,
            &db2,
        ] {
            dparams.extend_from_slice(part);
        }
        Ok((dx, dparams, dbias))
    }
}

impl CustomOp3 for Block {
    fn name(&self) -> &'static str {
        "fused-transformer-block"
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
        let (b, t, _) = l1.shape().dims3()?;
        let x = slice(s1, l1, "transformer block: x")?;
        let params = Params::split(slice(s2, l2, "transformer block: parameters")?, self.dims)?;
        let bias = slice(s3, l3, "transformer block: bias parameters")?;
        let (y, saved) =
            crate::timing::time("block forward", || self.forward(x, &params, bias, (b, t)))?;
        *self.saved.lock().map_err(msg)? = Some(saved);
        Ok((CpuStorage::F32(y.into_vec()), l1.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        params: &Tensor,
        bias: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (b, t, _) = x.dims3()?;
        let saved = self.saved.lock().map_err(msg)?.take();
        let (dx, dparams, dbias) = with_f32(x, "transformer block: x", |xs| {
            with_f32(params, "transformer block: parameters", |ps| {
                with_f32(bias, "transformer block: bias parameters", |bs| {
                    with_f32(grad, "transformer block: gradient", |dy| {
                        let p = Params::split(ps, self.dims)?;
                        // A second backward pass through the same graph recomputes.
                        let s = match saved {
                            Some(s) => s,
                            None => self.forward(xs, &p, bs, (b, t))?.1,
                        };
                        crate::timing::time("block backward", || {
                            self.backward(xs, &p, bs, &s, dy, (b, t))
                        })
                    })
                })
            })
        })?;
        let dev = x.device();
        let dbias = match self.kind {
            Kind::None => None,
            _ => {
                let flat: Vec<f32> = dbias.iter().map(|&v| v as f32).collect();
                Some(Tensor::from_vec(flat, bias.shape(), dev)?)
            }
        };
        Ok((
            Some(Tensor::from_vec(dx.into_vec(), x.shape(), dev)?),
            Some(Tensor::from_vec(dparams, params.shape(), dev)?),
            dbias,
        ))
    }
}
