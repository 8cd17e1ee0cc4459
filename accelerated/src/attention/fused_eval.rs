//! The fused evaluation backend (CPU, inference): the encoding compiled once into the kernels'
//! bias sources ([`KernelBias`]), planned once per call, and attention through the tiled
//! online-softmax kernel ([`fire_kernels::fused_causal`]), so evaluation never builds an
//! `[H, N, N]` (nor `[H, chunk, N]`) tensor.
//!
//! FIRE compiles every layer's f_θ to its exact piecewise-linear form (a GeLU f_θ falls back to
//! direct evaluation inside the kernel), FIRE-S compiles once and every layer shares the one
//! plan, the baselines tabulate their distance function once. With one query this is the
//! decoding step against a KV cache ([`fire_kernels::decode`]'s computation): the bias row
//! costs O(K·H). No autograd: training has its own op with a backward pass
//! ([`super::fused_train`]). spec: [attn.logits], [attn.causal], [fire.shared]

use std::fmt;

use candle_core::{DType, Tensor};
use fire_kernels::{BiasPlan, Position, Shape};

use crate::encodings::KernelBias;
use crate::error::{ensure, Result};

/// One call's plans: each source planned once for these positions, and per layer the plan it
/// uses.
pub struct Plans<'a> {
    plans: Vec<Box<dyn BiasPlan + 'a>>,
    bias: &'a KernelBias,
}

impl fmt::Debug for Plans<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plans")
            .field("plans", &self.plans.len())
            .field("layers", &self.bias.layers())
            .finish()
    }
}

impl<'a> Plans<'a> {
    /// Plans every source of `bias` for these positions (a shared source once).
    pub fn new(
        bias: &'a KernelBias,
        queries: &'a [Position],
        keys: &'a [Position],
    ) -> Result<Self> {
        let plans = bias
            .sources()
            .iter()
            .map(|s| s.plan(queries, keys))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(Self { plans, bias })
    }

    /// Layer `l`'s plan (`None`: no bias).
    pub fn layer(&self, l: usize) -> Option<&dyn BiasPlan> {
        self.bias.layer(l).map(|s| self.plans[s].as_ref())
    }
}

/// Causal attention of `q: [B, H, T, d]` at `queries` against `k, v: [B, H, K, d]` at `keys`,
/// the bias filled per tile by `plan` (`None`: no bias); returns `[B, H, T, d]` in `q`'s dtype.
pub fn attend(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    queries: &[Position],
    keys: &[Position],
    plan: Option<&dyn BiasPlan>,
) -> Result<Tensor> {
    let (b, heads, t, head_dim) = q.dims4()?;
    let nk = k.dims()[2];
    ensure(nk == keys.len() && t == queries.len(), || {
        format!(
            "fused attention: {t} queries and {nk} keys, positions for {} and {}",
            queries.len(),
            keys.len()
        )
    })?;
    let flat =
        |x: &Tensor| -> Result<Vec<f32>> { Ok(x.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?) };
    let (qf, kf, vf) = (flat(q)?, flat(k)?, flat(v)?);
    let shape = Shape {
        heads,
        queries: t,
        keys: nk,
        head_dim,
    };
    let (pq, pk) = (heads * t * head_dim, heads * nk * head_dim);
    let mut out = Vec::with_capacity(b * pq);
    for r in 0..b {
        out.extend(fire_kernels::fused_causal(
            &qf[r * pq..(r + 1) * pq],
            &kf[r * pk..(r + 1) * pk],
            &vf[r * pk..(r + 1) * pk],
            shape,
            queries,
            keys,
            plan,
        )?);
    }
    Ok(Tensor::from_vec(out, (b, heads, t, head_dim), q.device())?.to_dtype(q.dtype())?)
}
