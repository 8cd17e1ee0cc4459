//! The accelerated crate (candle, f32 on the CPU) as a built-in implementation, checked like
//! any third party: `fire-conformance run --builtin accelerated` (cargo feature `accelerated`).
//!
//! It answers bias cases of FIRE, FIRE-S, per-layer FIRE and the baselines the accelerated
//! crate implements (Alibi, Kerple log/power, Sandwich in NeMo's centred form, T5 with the
//! official causal buckets, NoPE), causal attention outputs with any of those biases or with
//! RoPE (half-split), and FIRE's vector-Jacobian products through candle's autograd. Every other
//! case is skipped with the reason the accelerated crate cannot answer it. spec: [proto.reply]

use std::collections::BTreeMap;

use candle_core::{Device, Var};
use fire_accelerated::attention::causal_head;
use fire_accelerated::config::Threshold;
use fire_accelerated::encodings::alibi::Alibi;
use fire_accelerated::encodings::fire::Fire;
use fire_accelerated::encodings::kerple::{Form, Kerple};
use fire_accelerated::encodings::rope::Rope;
use fire_accelerated::encodings::sandwich::Sandwich;
use fire_accelerated::encodings::t5::T5;
use fire_accelerated::encodings::{AdditiveModule, Grid, PositionEncoding};

use super::f32_adapter::{
    self, attention_input, bias_output, cotangent, count, errored, f32_capabilities, positions,
    reply, setting, skip, tensor, to_f64, vector, Bias,
};
use crate::implementation::{Capabilities, Implementation, Reply, Request};
use crate::vectors::format::{BaselineParams, Encoding, Inputs, Kind, Tensor};
use crate::vectors::params::layer_name;

/// `fire-accelerated` in process.
#[derive(Debug, Default)]
pub struct Accelerated;

fn fire_module(p: &crate::vectors::format::FireParams, device: &Device) -> Result<Fire, Reply> {
    let (mlp, params) = f32_adapter::fire(p)?;
    Fire::from_params(&mlp, &params, device).map_err(errored)
}

fn fire_bias(f: &Fire, q: &[u64], k: &[u64]) -> Result<Bias, Reply> {
    Ok(Bias {
        heads: f.heads(),
        data: f.bias(q, k).map_err(errored)?,
    })
}

/// A baseline's bias, or the reason the accelerated crate has no such form.
fn baseline_bias(b: &BaselineParams, q: &[u64], k: &[u64], dev: &Device) -> Result<Bias, Reply> {
    let bias = |heads: usize, data: fire_accelerated::Result<Vec<f32>>| {
        Ok(Bias {
            heads,
            data: data.map_err(errored)?,
        })
    };
    match b.name.as_str() {
        "alibi" => {
            let slopes = vector(b, "slopes")?;
            let a = Alibi::with_slopes(&slopes, dev).map_err(errored)?;
            bias(slopes.len(), a.bias(q, k))
        }
        "alibi-standard" => {
            let heads = count(b, "heads")?;
            if heads == 0 {
                return Err(errored("alibi-standard: `heads` must be >= 1"));
            }
            let a = Alibi::new(heads, dev).map_err(errored)?;
            bias(heads, a.bias(q, k))
        }
        "kerple-log" | "kerple-power" => {
            let form = if b.name == "kerple-log" {
                Form::Log
            } else {
                Form::Power
            };
            let (r1, r2) = (vector(b, "r1")?, vector(b, "r2")?);
            let m = Kerple::from_params(form, &r1, &r2, dev).map_err(errored)?;
            bias(r1.len(), m.bias(q, k))
        }
        "sandwich-centred" => {
            let heads = count(b, "heads")?;
            let s = Sandwich::new(heads, count(b, "head_dim")?, dev).map_err(errored)?;
            bias(heads, s.bias(q, k))
        }
        "t5-official" => {
            if setting(b, "bidirectional")? != 0 {
                return Err(skip(
                    "the accelerated crate has only the unidirectional (causal) T5 buckets",
                ));
            }
            let max_distance = u64::try_from(setting(b, "max_distance")?)
                .map_err(|_| errored("t5-official: setting `max_distance` must be >= 0"))?;
            let values = tensor(b, "values")?;
            let [heads, buckets] = values.shape[..] else {
                return Err(errored("t5-official: `values` must be [heads, buckets]"));
            };
            if count(b, "num_buckets")? != buckets {
                return Err(errored(
                    "t5-official: `num_buckets` differs from the width of `values`",
                ));
            }
            let table: Vec<Vec<f64>> = (0..buckets)
                .map(|n| (0..heads).map(|h| values.data[h * buckets + n]).collect())
                .collect();
            let t = T5::from_params(&table, max_distance, dev).map_err(errored)?;
            bias(heads, t.bias(q, k))
        }
        "nope" => {
            let heads = count(b, "heads")?;
            if heads == 0 {
                return Err(errored("nope: heads must be > 0"));
            }
            bias(heads, Ok(vec![0.0; heads * q.len() * k.len()]))
        }
        "sandwich-paper" => Err(skip(
            "the accelerated crate implements Sandwich only in NeMo's centred form \
             (no learned r1/r2 paper form)",
        )),
        "t5-simplified" | "t5-buckets" => Err(skip(
            "the accelerated crate implements T5 only with the official log-binned buckets \
             (no simplified cap or explicit-boundary form)",
        )),
        other => Err(skip(format!(
            "the accelerated crate has no additive `{other}` bias"
        ))),
    }
}

/// One bias per layer: FIRE-S evaluates its module once, per-layer FIRE each module.
/// spec: [fire.shared], [fire.per-layer]
fn layer_biases(encoding: &Encoding, q: &[u64], k: &[u64]) -> Result<Vec<Bias>, Reply> {
    let dev = Device::Cpu;
    match encoding {
        Encoding::Fire(p) => Ok(vec![fire_bias(&fire_module(p, &dev)?, q, k)?]),
        Encoding::FireShared(s) => {
            if s.layers == 0 {
                return Err(errored("FIRE-S needs at least one layer"));
            }
            let once = fire_bias(&fire_module(&s.module, &dev)?, q, k)?;
            Ok((0..s.layers)
                .map(|_| Bias {
                    heads: once.heads,
                    data: once.data.clone(),
                })
                .collect())
        }
        Encoding::FirePerLayer(p) => {
            if p.modules.is_empty() {
                return Err(errored("per-layer FIRE needs at least one layer"));
            }
            p.modules
                .iter()
                .map(|m| fire_bias(&fire_module(m, &dev)?, q, k))
                .collect()
        }
        Encoding::Baseline(b) => Ok(vec![baseline_bias(b, q, k, &dev)?]),
    }
}

/// Causal attention per head (bias after the 1/√d scaling), `[H, Q, d_v]`.
/// spec: [attn.logits], [attn.placement], [attn.causal]
fn attention(inputs: &Inputs, bias: &Bias, q: &[u64], k: &[u64]) -> Result<Tensor, Reply> {
    let h = bias.heads;
    let (dq, qs) = attention_input("q", &inputs.q, h)?;
    let (dk, ks) = attention_input("k", &inputs.k, h)?;
    let (dv, vs) = attention_input("v", &inputs.v, h)?;
    let (nq, nk) = (q.len(), k.len());
    if qs.len() != h * nq * dq || ks.len() != h * nk * dk || vs.len() != h * nk * dv {
        return Err(errored("attention inputs do not match the position counts"));
    }
    let mut out = Vec::with_capacity(h * nq * dv);
    for head in 0..h {
        let o = causal_head(
            &qs[head * nq * dq..(head + 1) * nq * dq],
            &ks[head * nk * dk..(head + 1) * nk * dk],
            &vs[head * nk * dv..(head + 1) * nk * dv],
            &bias.data[head * nq * nk..(head + 1) * nq * nk],
            q,
            k,
            &Device::Cpu,
        )
        .map_err(errored)?;
        out.extend(to_f64(&o));
    }
    Ok(Tensor::new(vec![h, nq, dv], out))
}

/// RoPE attention: queries and keys rotated by the accelerated crate's `Rope`, no bias.
/// spec: [rope.rotation], [rope.score]
fn rope_attention(
    b: &BaselineParams,
    inputs: &Inputs,
    q: &[u64],
    k: &[u64],
) -> Result<Tensor, Reply> {
    if setting(b, "interleaved")? != 0 {
        return Err(skip(
            "the accelerated crate's RoPE uses only the half-split (GPT-NeoX) pairing",
        ));
    }
    let scalar = |key: &str| -> Result<f64, Reply> {
        match tensor(b, key)?.data[..] {
            [v] => Ok(v),
            _ => Err(errored(format!("rope: `{key}` must be a scalar"))),
        }
    };
    let heads = inputs
        .q
        .as_ref()
        .and_then(|t| t.shape.first().copied())
        .unwrap_or(0);
    let (d, qs) = attention_input("q", &inputs.q, heads)?;
    let (dk, ks) = attention_input("k", &inputs.k, heads)?;
    if dk != d || qs.len() != heads * q.len() * d || ks.len() != heads * k.len() * d {
        return Err(errored("rope: q and k shapes do not match the positions"));
    }
    // The suite's scale multiplies positions (s = L_train / L_target ≤ 1, spec: [rope.pi]); the
    // accelerated crate divides them by its own, so it takes 1/s.
    let s = scalar("scale")?;
    if !(s.is_finite() && s > 0.0) {
        return Err(errored(format!(
            "rope: scale must be finite and > 0, got {s}"
        )));
    }
    let rope = Rope::new(scalar("base")?, 1.0 / s, d).map_err(errored)?;
    let rotate = |x: Vec<f32>, positions: &[u64]| -> Result<Vec<f64>, Reply> {
        let t = candle_core::Tensor::from_vec(x, (heads, positions.len(), d), &Device::Cpu)
            .map_err(errored)?;
        let r = rope.rotate(&t, positions).map_err(errored)?;
        let v: Vec<f32> = r.flatten_all().and_then(|r| r.to_vec1()).map_err(errored)?;
        Ok(to_f64(&v))
    };
    let mut rotated = inputs.clone();
    rotated.q = Some(Tensor::new(vec![heads, q.len(), d], rotate(qs, q)?));
    rotated.k = Some(Tensor::new(vec![heads, k.len(), d], rotate(ks, k)?));
    let zero = Bias {
        heads,
        data: vec![0.0; heads * q.len() * k.len()],
    };
    attention(&rotated, &zero, q, k)
}

/// FIRE's vector-Jacobian product through candle's autograd: the module is rebuilt on `Var`s,
/// `Σ cotangent ⊙ b` is differentiated, and the gradients come back in Appendix E's names.
/// spec: [grad.vjp], [grad.layout]
fn vjp(
    p: &crate::vectors::format::FireParams,
    inputs: &Inputs,
    q: &[u64],
    k: &[u64],
) -> Result<BTreeMap<String, Tensor>, Reply> {
    let dev = Device::Cpu;
    let mut fire = fire_module(p, &dev)?;
    let want = [fire.heads(), q.len(), k.len()];
    let cot = cotangent(inputs, want)?;
    let var = |t: &candle_core::Tensor| Var::from_tensor(t).map_err(errored);
    let mut layer_vars = Vec::new();
    for (w, b) in &mut fire.layers {
        let (vw, vb) = (var(w)?, var(b)?);
        *w = vw.as_tensor().clone();
        *b = vb.as_tensor().clone();
        layer_vars.push((vw, vb));
    }
    let c = var(&fire.c)?;
    fire.c = c.as_tensor().clone();
    let m = var(&fire.l_multiplier)?;
    fire.l_multiplier = m.as_tensor().clone();
    let grads = (|| -> candle_core::Result<_> {
        let cot: Vec<f32> = cot.data.iter().map(|&x| x as f32).collect();
        let cot = candle_core::Tensor::from_vec(cot, (want[0], want[1], want[2]), &dev)?;
        let grid = Grid::new(q, k, &dev).map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        let b = fire
            .bias_tensor(&grid)
            .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        (b * cot)?.sum_all()?.backward()
    })()
    .map_err(errored)?;
    let grad = |v: &Var| -> Result<Tensor, Reply> {
        let shape = v.dims().to_vec();
        let data: Vec<f32> = match grads.get(v) {
            Some(g) => g.flatten_all().and_then(|g| g.to_vec1()).map_err(errored)?,
            None => vec![0.0; v.elem_count()],
        };
        Ok(Tensor::new(shape, to_f64(&data)))
    };
    let mut out = BTreeMap::new();
    for (n, (w, b)) in layer_vars.iter().enumerate() {
        out.insert(format!("{}.weight", layer_name(n)), grad(w)?);
        out.insert(format!("{}.bias", layer_name(n)), grad(b)?);
    }
    out.insert("c".into(), grad(&c)?);
    if fire.threshold == Threshold::Learnable {
        out.insert("L_multiplier".into(), grad(&m)?);
    }
    Ok(out)
}

fn evaluate(r: &Request) -> Result<BTreeMap<String, Tensor>, Reply> {
    let (q, k) = positions(r)?;
    let mut out = BTreeMap::new();
    match (r.kind, &r.encoding) {
        (Kind::Bias, Encoding::Baseline(b)) if b.name == "rope" => {
            return Err(errored("RoPE is not an additive bias"))
        }
        (Kind::Bias, e) => {
            let layers = layer_biases(e, &q, &k)?;
            out.insert("bias".into(), bias_output(e, &layers, q.len(), k.len()));
        }
        (Kind::Attention, Encoding::Baseline(b)) if b.name == "rope" => {
            out.insert("output".into(), rope_attention(b, &r.inputs, &q, &k)?);
        }
        (Kind::Attention, e) => {
            let layers = layer_biases(e, &q, &k)?;
            let [bias] = &layers[..] else {
                return Err(errored("attention cases take a single-layer encoding"));
            };
            out.insert("output".into(), attention(&r.inputs, bias, &q, &k)?);
        }
        (Kind::Vjp, Encoding::Fire(p)) => out = vjp(p, &r.inputs, &q, &k)?,
        (Kind::Vjp, _) => return Err(errored("gradients are defined for a single FIRE module")),
    }
    Ok(out)
}

impl Implementation for Accelerated {
    fn capabilities(&mut self) -> crate::error::Result<Capabilities> {
        Ok(f32_capabilities("fire-accelerated (candle, cpu)"))
    }

    fn run(&mut self, r: &Request) -> Reply {
        reply(evaluate(r))
    }
}
