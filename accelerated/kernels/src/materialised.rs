//! The slow, obvious twins of the fast paths: the whole `[H, Nq, Nk]` bias computed by running
//! the MLP on every pair (what Appendix E's module does), and plain softmax attention over a
//! materialised bias. Tests hold the fused kernel to these; benchmarks measure against them.
//! spec: [fire.bias], [attn.logits], [attn.causal]

use std::ops::Range;

use fire_vocabulary::{Activation, Position};
use rayon::prelude::*;

use crate::attention::Shape;
use crate::error::{shape, Result};
use crate::fire::FireParams;
use crate::mlp::{Mlp, Sigma};
use crate::tile::{BiasPlan, TileBias};

/// f_θ in f32 with its weights laid out for per-pair evaluation, as the PyTorch module runs it.
#[derive(Debug, Clone)]
pub struct DenseMlp {
    layers: Vec<(Vec<f32>, Vec<f32>, usize, usize)>,
    activation: Activation,
    final_activation: Option<Activation>,
}

impl DenseMlp {
    /// The f32 copy of `mlp`.
    pub fn new(mlp: &Mlp) -> Self {
        let layers = mlp
            .layers
            .iter()
            .map(|l| {
                let w = l.weight.iter().map(|&v| v as f32).collect();
                let b = l.bias.iter().map(|&v| v as f32).collect();
                (w, b, l.inputs, l.outputs)
            })
            .collect();
        Self {
            layers,
            activation: mlp.activation,
            final_activation: mlp.final_activation,
        }
    }

    /// f_θ(x) for every head into `out`; `a`, `b` are scratch.
    pub fn eval(&self, x: f32, a: &mut Vec<f32>, b: &mut Vec<f32>, out: &mut [f32]) {
        let last = self.layers.len() - 1;
        a.clear();
        a.push(x);
        for (n, (w, bias, inputs, outputs)) in self.layers.iter().enumerate() {
            b.clear();
            let sigma = if n < last {
                Some(self.activation)
            } else {
                self.final_activation
            };
            for o in 0..*outputs {
                let z = w[o * inputs..(o + 1) * inputs]
                    .iter()
                    .zip(a.iter())
                    .fold(bias[o], |s, (w, v)| s + w * v);
                b.push(match sigma {
                    None | Some(Activation::Identity) => z,
                    Some(Activation::Relu) => z.max(0.0),
                    Some(s) => s.apply(f64::from(z)) as f32,
                });
            }
            std::mem::swap(a, b);
        }
        out.copy_from_slice(a);
    }
}

/// FIRE's bias the Appendix E way: for every (query, key) pair, x = ψ(|i − j|)/(ψ(max(i, L))
/// + ε), then the MLP, in f32, all heads at once. Returns `[H, Nq, Nk]` row-major.
pub fn fire_bias(
    mlp: &Mlp,
    params: &FireParams,
    queries: &[Position],
    keys: &[Position],
) -> Result<Vec<f32>> {
    params.validate()?;
    let heads = mlp.heads();
    let (nq, nk) = (queries.len(), keys.len());
    let dense = DenseMlp::new(mlp);
    // Rows of [Nq, Nk, H], then transposed to [H, Nq, Nk] like the module's permute.
    let mut pairs = vec![0f32; nq * nk * heads];
    pairs
        .par_chunks_mut(nk * heads)
        .zip(queries.par_iter())
        .for_each(|(row, &i)| {
            let norm = params.normaliser(i as f64) as f32;
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for (out, &j) in row.chunks_exact_mut(heads).zip(keys) {
                let x = params.psi(i.abs_diff(j) as f64) as f32 / norm;
                dense.eval(x, &mut a, &mut b, out);
            }
        });
    let mut out = vec![0f32; heads * nq * nk];
    out.par_chunks_mut(nq * nk).enumerate().for_each(|(h, o)| {
        for (x, p) in o.iter_mut().zip(pairs.chunks_exact(heads)) {
            *x = p[h];
        }
    });
    Ok(out)
}

/// A materialised `[H, Nq, Nk]` bias served to the fused kernel tile by tile: isolates what
/// materialising costs (the MLP on every pair, the memory) from the attention kernel.
#[derive(Debug, Clone)]
pub struct Materialised {
    /// `[H, Nq, Nk]`.
    pub data: Vec<f32>,
    /// `Nq`.
    pub queries: usize,
    /// `Nk`.
    pub keys: usize,
}

impl BiasPlan for Materialised {
    fn fill(
        &self,
        head: usize,
        rows: Range<usize>,
        cols: Range<usize>,
        out: &mut [f32],
        stride: usize,
    ) {
        for (r, q) in rows.enumerate() {
            let at = (head * self.queries + q) * self.keys;
            out[r * stride..r * stride + cols.len()]
                .copy_from_slice(&self.data[at + cols.start..at + cols.end]);
        }
    }

    fn bytes(&self) -> usize {
        4 * self.data.len()
    }
}

/// Any tile source's bias in full, `[H, Nq, Nk]`, by asking for one tile per head.
pub fn bias(encoding: &dyn TileBias, queries: &[Position], keys: &[Position]) -> Result<Vec<f32>> {
    let plan = encoding.plan(queries, keys)?;
    let (nq, nk) = (queries.len(), keys.len());
    let mut out = vec![0f32; encoding.heads() * nq * nk];
    out.par_chunks_mut(nq * nk)
        .enumerate()
        .for_each(|(h, o)| plan.fill(h, 0..nq, 0..nk, o, nk));
    Ok(out)
}

/// Plain causal attention over a materialised bias (`None`: no bias): for each head and query,
/// the logits q·k/√d + b over the visible keys, a softmax, the weighted sum of values.
pub fn attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    shape_: Shape,
    queries: &[Position],
    keys: &[Position],
    bias: Option<&[f32]>,
) -> Result<Vec<f32>> {
    shape_.check(q, k, v, queries, keys)?;
    let Shape {
        heads,
        queries: nq,
        keys: nk,
        head_dim: d,
    } = shape_;
    if let Some(b) = bias {
        if b.len() != heads * nq * nk {
            return Err(shape("bias [H, Nq, Nk]", heads * nq * nk, b.len()));
        }
    }
    let scale = 1.0 / (d as f32).sqrt();
    let mut out = vec![0f32; heads * nq * d];
    out.par_chunks_mut(d).enumerate().for_each(|(hq, o)| {
        let (h, r) = (hq / nq, hq % nq);
        let i = queries[r];
        let qr = &q[hq * d..(hq + 1) * d];
        let logits: Vec<(usize, f32)> = (0..nk)
            .filter(|&t| keys[t] <= i)
            .map(|t| {
                let kt = &k[(h * nk + t) * d..(h * nk + t + 1) * d];
                let dot: f32 = qr.iter().zip(kt).map(|(a, b)| a * b).sum();
                let b = bias.map_or(0.0, |b| b[(h * nq + r) * nk + t]);
                (t, dot * scale + b)
            })
            .collect();
        let max = logits.iter().fold(f32::NEG_INFINITY, |m, &(_, s)| m.max(s));
        let weights: Vec<f32> = logits.iter().map(|&(_, s)| (s - max).exp()).collect();
        let total: f32 = weights.iter().sum();
        for (&(t, _), w) in logits.iter().zip(&weights) {
            let vt = &v[(h * nk + t) * d..(h * nk + t + 1) * d];
            for (x, y) in o.iter_mut().zip(vt) {
                *x += w / total * y;
            }
        }
    });
    Ok(out)
}
