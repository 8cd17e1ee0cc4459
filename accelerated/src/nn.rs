//! Differentiable building blocks.
//!
//! candle-nn's fused `softmax_last_dim`, `layer_norm` and `rms_norm` are custom ops with no
//! backward pass: a model trained through them silently stops learning the layers below. On
//! f32 CPU tensors the layer norm, the MLP's bias + GeLU and the cross-entropy run as this
//! crate's own fused ops *with* backward passes ([`crate::ops`]); everywhere else (CUDA, other
//! dtypes) as compositions of primitive tensor ops, all of which candle differentiates. The
//! compositions stay public (`*_composed`) as the fused ops' slow twins.

use candle_core::{Tensor, D};

use crate::error::Result;
use crate::ops;
use crate::params::{Init, Path};

/// `y = x·Wᵀ + b`, PyTorch's `nn.Linear` layout (`weight: [out, in]`) and initialisation
/// (U(−1/√in, 1/√in) for both weight and bias).
#[derive(Debug, Clone)]
pub struct Linear {
    /// `[out, in]`.
    pub weight: Tensor,
    /// `[out]`, if any.
    pub bias: Option<Tensor>,
}

impl Linear {
    /// A layer named `weight`/`bias` under `path`.
    pub fn new(path: &mut Path<'_>, fan_in: usize, fan_out: usize, bias: bool) -> Result<Self> {
        let bound = 1.0 / (fan_in as f64).sqrt();
        let weight = path.param("weight", &[fan_out, fan_in], Init::Uniform(-bound, bound))?;
        let bias = if bias {
            Some(path.param("bias", &[fan_out], Init::Uniform(-bound, bound))?)
        } else {
            None
        };
        Ok(Self { weight, bias })
    }

    /// A layer whose weight uses N(0, std²) and whose bias starts at zero (GPT-2's scheme for
    /// the transformer's own matrices).
    pub fn normal(
        path: &mut Path<'_>,
        fan_in: usize,
        fan_out: usize,
        bias: bool,
        std: f64,
    ) -> Result<Self> {
        let weight = path.param("weight", &[fan_out, fan_in], Init::Normal(std))?;
        let bias = if bias {
            Some(path.param("bias", &[fan_out], Init::Const(0.0))?)
        } else {
            None
        };
        Ok(Self { weight, bias })
    }

    /// Applies the layer to the last dimension of `x`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = self.matmul(x)?;
        Ok(match &self.bias {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        })
    }

    /// `gelu(x·Wᵀ + b)` (the erf form): the MLP's first layer, its bias and activation fused
    /// into one op on the CPU.
    pub fn forward_gelu(&self, x: &Tensor) -> Result<Tensor> {
        let y = self.matmul(x)?;
        Ok(match &self.bias {
            Some(b) if ops::fusable(&y) => ops::bias_gelu(&y, b)?,
            Some(b) => y.broadcast_add(b)?.gelu_erf()?,
            None => y.gelu_erf()?,
        })
    }

    /// `x·Wᵀ` over the last dimension. Leading dimensions fold into the rows of one matrix
    /// product (one large GEMM forward and backward, where a batched product would give the
    /// weight's gradient as a `[B, in, out]` tensor to sum).
    fn matmul(&self, x: &Tensor) -> Result<Tensor> {
        let dims = x.dims();
        let Some((&inner, lead)) = dims.split_last() else {
            return Ok(x.broadcast_matmul(&self.weight.t()?)?);
        };
        if lead.len() < 2 || !ops::enabled() {
            return Ok(x.broadcast_matmul(&self.weight.t()?)?);
        }
        let rows: usize = lead.iter().product();
        let y = x.reshape((rows, inner))?.matmul(&self.weight.t()?)?;
        let mut out = lead.to_vec();
        out.push(y.dim(1)?);
        Ok(y.reshape(out)?)
    }
}

/// Layer normalisation over the last dimension, with weight and bias.
#[derive(Debug, Clone)]
pub struct LayerNorm {
    /// γ, `[d]`.
    pub weight: Tensor,
    /// β, `[d]`.
    pub bias: Tensor,
    /// ε.
    pub eps: f64,
}

impl LayerNorm {
    /// γ = 1, β = 0.
    pub fn new(path: &mut Path<'_>, dim: usize, eps: f64) -> Result<Self> {
        Ok(Self {
            weight: path.param("weight", &[dim], Init::Const(1.0))?,
            bias: path.param("bias", &[dim], Init::Const(0.0))?,
            eps,
        })
    }

    /// `(x − mean) / √(var + ε) · γ + β` (the fused op on the CPU).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if ops::fusable(x) {
            return Ok(ops::layer_norm(x, &self.weight, &self.bias, self.eps)?);
        }
        self.forward_composed(x)
    }

    /// [`Self::forward`] as a composition of candle primitives (the slow twin).
    pub fn forward_composed(&self, x: &Tensor) -> Result<Tensor> {
        let mean = x.mean_keepdim(D::Minus1)?;
        let centred = x.broadcast_sub(&mean)?;
        let var = centred.sqr()?.mean_keepdim(D::Minus1)?;
        let normed = centred.broadcast_div(&(var + self.eps)?.sqrt()?)?;
        Ok(normed
            .broadcast_mul(&self.weight)?
            .broadcast_add(&self.bias)?)
    }
}

/// Softmax over the last dimension. The row maximum is subtracted for stability and detached:
/// softmax is shift-invariant, so the shift needs no gradient. Entries of `−∞` (masked keys)
/// get probability exactly 0 and gradient exactly 0.
pub fn softmax_last(x: &Tensor) -> Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?.detach();
    let e = x.broadcast_sub(&max)?.exp()?;
    let total = e.sum_keepdim(D::Minus1)?;
    Ok(e.broadcast_div(&total)?)
}

/// log-softmax over the last dimension (same stabilisation as [`softmax_last`]).
pub fn log_softmax_last(x: &Tensor) -> Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?.detach();
    let shifted = x.broadcast_sub(&max)?;
    let lse = shifted.exp()?.sum_keepdim(D::Minus1)?.log()?;
    Ok(shifted.broadcast_sub(&lse)?)
}

/// Mean negative log-likelihood of `targets` (`[N]`, u32) under `logits` (`[N, V]`) (the
/// fused op on the CPU).
pub fn cross_entropy(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    if ops::fusable(logits) && targets.dtype() == candle_core::DType::U32 {
        return Ok(ops::cross_entropy(logits, targets)?);
    }
    cross_entropy_composed(logits, targets)
}

/// [`cross_entropy`] as a composition of candle primitives (the slow twin).
pub fn cross_entropy_composed(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    let logp = log_softmax_last(logits)?;
    let picked = logp.gather(&targets.unsqueeze(1)?, 1)?;
    Ok(picked.neg()?.mean_all()?)
}

/// Sum of negative log-likelihoods, as f64 (for perplexity over many windows).
pub fn nll_sum(logits: &Tensor, targets: &Tensor) -> Result<f64> {
    let logp = log_softmax_last(logits)?;
    let picked = logp.gather(&targets.unsqueeze(1)?, 1)?;
    let v: Vec<f32> = picked.flatten_all()?.to_vec1()?;
    Ok(-v.iter().map(|&x| f64::from(x)).sum::<f64>())
}

/// The negative log-likelihood of every target (`[N]`, u32) under `logits` (`[N, V]`), as f64.
pub fn nll_rows(logits: &Tensor, targets: &Tensor) -> Result<Vec<f64>> {
    let logp = log_softmax_last(logits)?;
    let picked = logp.gather(&targets.unsqueeze(1)?, 1)?;
    let v: Vec<f32> = picked.flatten_all()?.to_vec1()?;
    Ok(v.iter().map(|&x| -f64::from(x)).collect())
}
