//! The kernels crate (`fire-kernels`) as a built-in implementation: `fire-conformance run
//! --builtin fast` (cargo feature `fast`, which pulls the kernels and no tensor library). Where
//! [`super::accelerated`] checks the candle modules, this checks what evaluation and training
//! actually run: FIRE compiled to its exact piecewise-linear form (a GeLU f_θ evaluated
//! directly), the baselines tabulated per distance, the fused tiled attention, and the fused
//! backward pass's FIRE gradient (segment sums; `fire_kernels::fire_grad`).
//!
//! Cases outside the kernels' contract are skipped with the reason: key positions that are not
//! non-decreasing (the kernels take keys as a KV cache holds them), value widths that differ
//! from the query width, and the baseline forms the crate does not implement. spec: [proto.reply]

use std::collections::BTreeMap;

use fire_kernels::{self as kernels, DistanceBias, DistanceEncoding, FireBias, TileBias};

use super::f32_adapter::{
    self, attention_input, bias_output, cotangent, count, errored, f32_capabilities, positions,
    reply, setting, skip, tensor, to_f64, vector, Bias,
};
use crate::implementation::{Capabilities, Implementation, Reply, Request};
use crate::vectors::format::{BaselineParams, Encoding, Inputs, Kind, Tensor};
use crate::vectors::params::layer_name;

/// `fire-kernels` in process.
#[derive(Debug, Default)]
pub struct Fast;

/// The module as the kernels hold it, with ψ tabulated for distances below `capacity`.
fn fire(p: &crate::vectors::format::FireParams, capacity: usize) -> Result<FireBias, Reply> {
    let (mlp, params) = f32_adapter::fire(p)?;
    FireBias::new(mlp, params, capacity).map_err(errored)
}

/// A baseline tabulated per distance, or the reason the crate has no such form.
fn baseline(b: &BaselineParams, capacity: usize) -> Result<DistanceBias, Reply> {
    let (encoding, heads) = match b.name.as_str() {
        "alibi" => {
            let slopes = vector(b, "slopes")?;
            let h = slopes.len();
            (DistanceEncoding::Alibi { slopes }, h)
        }
        "alibi-standard" => {
            let h = count(b, "heads")?;
            if h == 0 {
                return Err(errored("alibi-standard: `heads` must be >= 1"));
            }
            (
                DistanceEncoding::Alibi {
                    slopes: fire_kernels::alibi_slopes(h),
                },
                h,
            )
        }
        "kerple-log" | "kerple-power" => {
            let (r1, r2) = (vector(b, "r1")?, vector(b, "r2")?);
            let h = r1.len();
            if b.name == "kerple-log" {
                (DistanceEncoding::KerpleLog { r1, r2 }, h)
            } else {
                (DistanceEncoding::KerplePower { r1, r2 }, h)
            }
        }
        "sandwich-centred" => {
            let heads = count(b, "heads")?;
            let dim = count(b, "head_dim")?;
            (DistanceEncoding::Sandwich { heads, dim }, heads)
        }
        "t5-official" => {
            if setting(b, "bidirectional")? != 0 {
                return Err(skip("the fast kernels have only the causal T5 buckets"));
            }
            let values = tensor(b, "values")?;
            let [heads, buckets] = values.shape[..] else {
                return Err(errored("t5-official: `values` must be [heads, buckets]"));
            };
            if count(b, "num_buckets")? != buckets {
                return Err(errored(
                    "t5-official: `num_buckets` differs from the width of `values`",
                ));
            }
            let encoding = DistanceEncoding::T5 {
                buckets,
                max_distance: count(b, "max_distance")? as u64,
                table: values.data.clone(),
            };
            (encoding, heads)
        }
        "nope" => (DistanceEncoding::Nope, count(b, "heads")?),
        other => {
            return Err(skip(format!(
                "the fast kernels have no `{other}` bias (accelerated crate forms only)"
            )))
        }
    };
    DistanceBias::new(encoding, heads, capacity).map_err(errored)
}

/// The longest ψ / distance table the builtin builds: longer distances take the kernels'
/// per-entry path, so a case at huge positions costs no huge table.
const MAX_TABLE: usize = 1 << 16;

/// Distances the tables cover for these positions (at most [`MAX_TABLE`]).
fn capacity(q: &[u64], k: &[u64]) -> usize {
    q.iter()
        .chain(k)
        .copied()
        .max()
        .map_or(1, |m| (m as usize).saturating_add(1).min(MAX_TABLE))
}

/// The kernels' contract on key positions.
fn sorted_keys(k: &[u64]) -> Result<(), Reply> {
    if k.windows(2).all(|w| w[0] <= w[1]) {
        Ok(())
    } else {
        Err(skip(
            "the fast kernels take non-decreasing key positions (as a KV cache holds them)",
        ))
    }
}

/// Every head's full `[Q, K]` tile from the source's plan.
fn bias(source: &dyn TileBias, q: &[u64], k: &[u64]) -> Result<Bias, Reply> {
    sorted_keys(k)?;
    let plan = source.plan(q, k).map_err(errored)?;
    let (nq, nk, heads) = (q.len(), k.len(), source.heads());
    let mut data = vec![0f32; heads * nq * nk];
    for (h, tile) in data.chunks_exact_mut(nq * nk).enumerate() {
        plan.fill(h, 0..nq, 0..nk, tile, nk);
    }
    Ok(Bias { heads, data })
}

/// The sources of an encoding, one per layer.
fn sources(e: &Encoding, cap: usize) -> Result<Vec<Box<dyn TileBias>>, Reply> {
    Ok(match e {
        Encoding::Fire(p) => vec![Box::new(fire(p, cap)?)],
        Encoding::FireShared(s) => {
            if s.layers == 0 {
                return Err(errored("FIRE-S needs at least one layer"));
            }
            let once = fire(&s.module, cap)?;
            (0..s.layers)
                .map(|_| Box::new(once.clone()) as Box<dyn TileBias>)
                .collect()
        }
        Encoding::FirePerLayer(p) => {
            if p.modules.is_empty() {
                return Err(errored("per-layer FIRE needs at least one layer"));
            }
            p.modules
                .iter()
                .map(|m| Ok(Box::new(fire(m, cap)?) as Box<dyn TileBias>))
                .collect::<Result<_, Reply>>()?
        }
        Encoding::Baseline(b) if b.name == "rope" => {
            return Err(skip(
                "RoPE rotates q and k: the fast kernels take additive biases",
            ))
        }
        Encoding::Baseline(b) => vec![Box::new(baseline(b, cap)?)],
    })
}

/// The fused attention of one head set, `[H, Q, d]`. spec: [attn.logits], [attn.causal]
fn attention(
    inputs: &Inputs,
    source: &dyn TileBias,
    q: &[u64],
    k: &[u64],
) -> Result<Tensor, Reply> {
    sorted_keys(k)?;
    let h = source.heads();
    let (d, qs) = attention_input("q", &inputs.q, h)?;
    let (dk, ks) = attention_input("k", &inputs.k, h)?;
    let (dv, vs) = attention_input("v", &inputs.v, h)?;
    if dk != d || dv != d {
        return Err(skip("the fused kernel takes one head width for q, k and v"));
    }
    let shape = kernels::Shape {
        heads: h,
        queries: q.len(),
        keys: k.len(),
        head_dim: d,
    };
    let out = kernels::attend(&qs, &ks, &vs, shape, q, k, Some(source)).map_err(errored)?;
    Ok(Tensor::new(vec![h, q.len(), d], to_f64(&out)))
}

/// FIRE's vector-Jacobian product by the fused backward pass's gradient plan.
/// spec: [grad.vjp], [grad.layout]
fn vjp(
    p: &crate::vectors::format::FireParams,
    inputs: &Inputs,
    q: &[u64],
    k: &[u64],
) -> Result<BTreeMap<String, Tensor>, Reply> {
    sorted_keys(k)?;
    let module = fire(p, capacity(q, k))?;
    let (h, nq, nk) = (module.heads(), q.len(), k.len());
    let cot = cotangent(inputs, [h, nq, nk])?;
    let plan = module.grad_plan(q, k).map_err(errored)?;
    let mut stats = vec![0f64; plan.stats_len()];
    for hh in 0..h {
        let tile: Vec<f32> = cot.data[hh * nq * nk..(hh + 1) * nq * nk]
            .iter()
            .map(|&x| x as f32)
            .collect();
        plan.accumulate(hh, 0..nq, 0..nk, &tile, nk, &mut stats);
    }
    let grad = plan.gradient(&stats).map_err(errored)?;
    let mut out = BTreeMap::new();
    let mut at = 0;
    for (n, l) in p.mlp.layers.iter().enumerate() {
        let (w, b) = (l.weight.shape.clone(), l.bias.shape.clone());
        let (nw, nb) = (w.iter().product::<usize>(), b.iter().product::<usize>());
        out.insert(
            format!("{}.weight", layer_name(n)),
            Tensor::new(w, grad[at..at + nw].to_vec()),
        );
        out.insert(
            format!("{}.bias", layer_name(n)),
            Tensor::new(b, grad[at + nw..at + nw + nb].to_vec()),
        );
        at += nw + nb;
    }
    out.insert("c".into(), Tensor::new(vec![], vec![grad[at]]));
    if p.threshold == "learnable" {
        out.insert(
            "L_multiplier".into(),
            Tensor::new(vec![], vec![grad[at + 1]]),
        );
    }
    Ok(out)
}

fn evaluate(r: &Request) -> Result<BTreeMap<String, Tensor>, Reply> {
    let (q, k) = positions(r)?;
    if q.is_empty() || k.is_empty() {
        return Err(errored("query and key position lists must be non-empty"));
    }
    if let Some(p) = q.iter().chain(&k).find(|&&p| p > kernels::MAX_POSITION) {
        return Err(errored(format!(
            "position {p} is beyond 2^53 (not exact in binary64)"
        )));
    }
    let cap = capacity(&q, &k);
    let mut out = BTreeMap::new();
    match (r.kind, &r.encoding) {
        (Kind::Bias, e) => {
            let layers = sources(e, cap)?
                .iter()
                .map(|s| bias(s.as_ref(), &q, &k))
                .collect::<Result<Vec<_>, Reply>>()?;
            out.insert("bias".into(), bias_output(e, &layers, q.len(), k.len()));
        }
        (Kind::Attention, e) => {
            let [source] = &sources(e, cap)?[..] else {
                return Err(errored("attention cases take a single-layer encoding"));
            };
            out.insert(
                "output".into(),
                attention(&r.inputs, source.as_ref(), &q, &k)?,
            );
        }
        (Kind::Vjp, Encoding::Fire(p)) => out = vjp(p, &r.inputs, &q, &k)?,
        (Kind::Vjp, _) => return Err(errored("gradients are defined for a single FIRE module")),
    }
    Ok(out)
}

impl Implementation for Fast {
    fn capabilities(&mut self) -> crate::error::Result<Capabilities> {
        Ok(f32_capabilities(
            "fire-kernels (compiled FIRE, fused attention, cpu)",
        ))
    }

    fn run(&mut self, r: &Request) -> Reply {
        reply(evaluate(r))
    }
}
