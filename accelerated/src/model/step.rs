//! A training step's loss and gradients through the fused ops, with the backward pass written
//! out instead of left to candle's autograd.
//!
//! Why: with every block one op ([`crate::ops::block`]), what autograd still did in a step
//! was mostly bookkeeping — each node's inputs get their gradient as a fresh zero tensor plus
//! the incoming one, every reshape and the parameters' `cat` are nodes of their own, and the
//! `[B·T, V]` logits' gradient went through that three times — serial passes over memory that
//! were ~65 % of the backward pass outside the blocks (perf, NoPE small step: the candle
//! `vec_add` and `zeros` under `backward`). Here the chain is short and fixed:
//!
//! ```text
//! x₀ = E[tokens]    x_{l+1} = block_l(x_l)    h = LN_f(x_L)    logits = h·Wᵀ    loss = CE
//! ```
//!
//! (`W = E` for the tied head), so its backward is the blocks' own backward passes in reverse
//! between the head's two products and the embedding's scatter. What autograd keeps is the
//! encoding: the bias parameters each block reads are a candle function of the encoding's
//! weights (FIRE's MLP, Kerple's slopes, …), and their gradient is carried on as the gradient
//! of `Σ_l ⟨bias_l, dbias_l⟩` — one small backward pass over that subgraph only.
//!
//! The same arithmetic as the candle path (`tests/fused_train.rs` holds the two to float noise
//! in the loss and in every parameter's gradient, for each additive encoding, with position
//! offsets and an untied head). spec: [grad.vjp]

use candle_core::backprop::GradStore;
use candle_core::{DType, Tensor};
use fire_kernels::gemm::{matmul, Mat};

use super::Model;
use crate::attention::{Backend, Call, Positions};
use crate::error::{Error, Result};
use crate::ops::scratch::Scratch;
use crate::ops::{self, block, cross_entropy, layer_norm, with_f32};

/// A step's mean cross-entropy and the gradient of every trainable parameter it depends on.
#[derive(Debug)]
pub struct StepGradients {
    /// The loss.
    pub loss: f32,
    /// By parameter (candle's store, keyed like autograd's).
    pub grads: GradStore,
}

impl Model {
    /// The loss of predicting `targets` (`[B, T]`, u32) from `tokens` (`[B, T]`, u32) at
    /// positions `first..first + T`, and its gradients, through the fused ops — or `None` where
    /// they do not apply (not the fused training backend, blocks as candle ops, not f32 on the
    /// CPU, a block or head shape the fused block does not compute), and the caller takes
    /// candle's autograd. The same function as [`Self::forward_at`], cross-entropy and
    /// `backward()`.
    pub fn fused_step(
        &self,
        tokens: &Tensor,
        targets: &Tensor,
        backend: &Backend,
        first: u64,
    ) -> Result<Option<StepGradients>> {
        if !self.fused_blocks || !matches!(backend, Backend::FusedTrain) {
            return Ok(None);
        }
        let head = match &self.head {
            None => &self.embed,
            Some(h) if h.bias.is_none() => &h.weight,
            Some(_) => return Ok(None),
        };
        let cpu_f32 = [&self.embed, head, &self.ln_f.weight, &self.ln_f.bias];
        if !cpu_f32.into_iter().all(ops::fusable) {
            return Ok(None);
        }
        let Some(parts) = self
            .blocks
            .iter()
            .map(|b| b.param_parts())
            .collect::<Option<Vec<_>>>()
        else {
            return Ok(None);
        };
        let (b, t) = tokens.dims2()?;
        if t == 0 || targets.dims2()? != (b, t) {
            return Err(Error::Input(format!(
                "a step of {:?} tokens against {:?} targets",
                tokens.dims(),
                targets.dims()
            )));
        }
        let positions = if first == 0 {
            Positions::causal(0, t)
        } else {
            Positions::shifted(first, t)
        };
        let layers = self.blocks.len();
        let Call::FusedTrain { biases, start } =
            backend.prepare(self.encoding.as_ref(), layers, &positions, &self.device)?
        else {
            return Ok(None);
        };
        let forward = crate::timing::time("step: forward", || {
            self.step_forward(tokens, &parts, &biases, start, (b, t))
        })?;
        let (loss, dlogits) = crate::timing::time("step: loss", || {
            let t: Vec<u32> = targets.flatten_all()?.to_vec1()?;
            let v = self.cfg.vocab_size;
            let loss = cross_entropy::mean_loss(&forward.logits, &t, v)?;
            let mut dlogits = Scratch::overwritten(forward.logits.len());
            let scale = 1.0 / t.len() as f32;
            cross_entropy::gradient_into(&forward.logits, &t, v, scale, &mut dlogits)?;
            Ok::<_, Error>((loss, dlogits))
        })?;
        let grads = crate::timing::time("step: backward", || {
            self.step_backward(head, &parts, forward, &dlogits, (b, t))
        })?;
        Ok(Some(StepGradients { loss, grads }))
    }

    fn step_forward(
        &self,
        tokens: &Tensor,
        parts: &[[&Tensor; 12]],
        biases: &[crate::encodings::LayerBias],
        start: u64,
        (b, t): (usize, usize),
    ) -> Result<Forward> {
        let cfg = &self.cfg;
        let (d, v) = (cfg.d_model, cfg.vocab_size);
        let ids: Vec<u32> = tokens.flatten_all()?.to_vec1()?;
        if let Some(bad) = ids.iter().find(|&&i| i as usize >= v) {
            return Err(Error::Input(format!(
                "token {bad} outside the vocabulary of {v}"
            )));
        }
        let e = values(&self.embed)?;
        // Every row is copied in.
        let mut x = Scratch::overwritten(ids.len() * d);
        for (&i, row) in ids.iter().zip(x.chunks_exact_mut(d)) {
            row.copy_from_slice(&e[i as usize * d..(i as usize + 1) * d]);
        }
        let dims = block::Dims {
            d_model: d,
            heads: cfg.n_heads,
            d_ff: cfg.d_ff,
        };
        let mut layers = Vec::with_capacity(parts.len());
        for (l, (parts, bias)) in parts.iter().zip(biases).enumerate() {
            let eps = self.blocks[l].ln1.eps;
            let (pass, bias_params) = block::Pass::new(bias, dims, eps, start, t, &self.device, l)?;
            let mut params = Vec::with_capacity(dims.params());
            for p in parts {
                with_f32(p, "block parameter", |p| {
                    params.extend_from_slice(p);
                    Ok(())
                })?;
            }
            let bias_values = with_f32(&bias_params, "bias parameters", |p| Ok(p.to_vec()))?;
            let (y, saved) = pass.forward(&x, &params, &bias_values, (b, t))?;
            let input = std::mem::replace(&mut x, y);
            layers.push(Layer {
                pass,
                input,
                params,
                bias_params,
                bias_values,
                saved,
            });
        }
        let ln = &self.ln_f;
        let mut h = Scratch::overwritten(x.len());
        let (gamma, beta) = (values(&ln.weight)?, values(&ln.bias)?);
        layer_norm::forward(&x, &gamma, &beta, ln.eps as f32, &mut h);
        let w = match &self.head {
            None => e,
            Some(h) => values(&h.weight)?,
        };
        let n = b * t;
        let mut logits = Scratch::overwritten(n * v);
        matmul(&mut logits, mat(&h, n, d)?, mat(&w, v, d)?.t(), false).map_err(msg)?;
        Ok(Forward {
            ids,
            layers,
            last: x,
            h,
            w,
            logits,
        })
    }

    fn step_backward(
        &self,
        head: &Tensor,
        parts: &[[&Tensor; 12]],
        forward: Forward,
        dlogits: &[f32],
        (b, t): (usize, usize),
    ) -> Result<GradStore> {
        let (d, v) = (self.cfg.d_model, self.cfg.vocab_size);
        let n = b * t;
        let dev = &self.device;
        let Forward {
            ids,
            layers,
            last,
            h,
            w,
            logits: _,
        } = forward;
        // The head: logits = h·Wᵀ.
        let mut dw = Scratch::overwritten(v * d);
        matmul(&mut dw, mat(dlogits, n, v)?.t(), mat(&h, n, d)?, false).map_err(msg)?;
        let mut dh = Scratch::overwritten(n * d);
        matmul(&mut dh, mat(dlogits, n, v)?, mat(&w, v, d)?, false).map_err(msg)?;
        drop(h);
        let ln = &self.ln_f;
        let (mut dy, dgamma, dbeta) =
            layer_norm::backward_plus(&last, &values(&ln.weight)?, &dh, None, d, ln.eps as f32)?;
        drop((dh, last));
        let mut named: Vec<(&Tensor, Tensor)> = vec![
            (
                &ln.weight,
                Tensor::from_vec(dgamma, ln.weight.shape(), dev)?,
            ),
            (&ln.bias, Tensor::from_vec(dbeta, ln.bias.shape(), dev)?),
        ];
        // The blocks, last first; each layer's activations are freed once used.
        let mut bias_terms = Vec::new();
        for (layer, parts) in layers.into_iter().zip(parts).rev() {
            let (dx, dparams, dbias) = layer.pass.backward(
                &layer.input,
                &layer.params,
                &layer.bias_values,
                &layer.saved,
                &dy,
                (b, t),
            )?;
            let mut rest = &dparams[..];
            for p in parts {
                let (g, tail) = rest.split_at(p.elem_count());
                rest = tail;
                named.push((p, Tensor::from_vec(g.to_vec(), p.shape(), dev)?));
            }
            if layer.pass.has_bias() {
                let g: Vec<f32> = dbias.iter().map(|&g| g as f32).collect();
                let g = Tensor::from_vec(g, layer.bias_params.shape(), dev)?;
                bias_terms.push((layer.bias_params * g)?.sum_all()?);
            }
            dy = dx;
        }
        // The embedding: x₀ = E[tokens] (and, tied, the head's W = E).
        let mut de = if self.head.is_none() {
            dw.into_vec()
        } else {
            named.push((head, Tensor::from_vec(dw.into_vec(), head.shape(), dev)?));
            vec![0f32; v * d]
        };
        for (&i, row) in ids.iter().zip(dy.chunks_exact(d)) {
            let at = i as usize * d;
            de[at..at + d]
                .iter_mut()
                .zip(row)
                .for_each(|(a, g)| *a += g);
        }
        named.push((&self.embed, Tensor::from_vec(de, self.embed.shape(), dev)?));
        // The encoding's weights, through autograd over the bias subgraph only.
        let root = match bias_terms.split_first() {
            Some((first, rest)) => rest.iter().try_fold(first.clone(), |a, b| a + b)?,
            None => Tensor::zeros((), DType::F32, dev)?,
        };
        let mut grads = root.backward()?;
        grads.remove(&root);
        for (p, g) in named {
            let g = match grads.remove(p) {
                // A parameter reached twice (the encoding reads a block's weight: none does
                // today) gets the sum.
                Some(other) => (g + other)?,
                None => g,
            };
            grads.insert(p, g);
        }
        Ok(grads)
    }
}

/// What the forward pass hands the backward pass.
struct Forward {
    /// The tokens.
    ids: Vec<u32>,
    layers: Vec<Layer>,
    /// The last block's output.
    last: Scratch,
    /// The final LayerNorm's output.
    h: Scratch,
    /// The head's weight `[V, D]` (the embedding's, tied).
    w: Vec<f32>,
    logits: Scratch,
}

/// One block's inputs and activations.
struct Layer {
    pass: block::Pass,
    input: Scratch,
    params: Vec<f32>,
    bias_params: Tensor,
    bias_values: Vec<f32>,
    saved: block::Saved,
}

/// A small tensor's values (the head, the embedding, a LayerNorm's γ and β).
fn values(t: &Tensor) -> Result<Vec<f32>> {
    Ok(t.flatten_all()?.to_vec1()?)
}

fn msg(e: impl std::fmt::Display) -> Error {
    Error::Input(format!("training step: {e}"))
}

fn mat(data: &[f32], rows: usize, cols: usize) -> Result<Mat<'_>> {
    Mat::row_major(data, rows, cols).map_err(msg)
}
