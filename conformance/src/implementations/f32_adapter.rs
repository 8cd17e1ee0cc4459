//! What the two in-process f32 implementations of this workspace share: `--builtin fast` (the
//! kernels crate, [`super::fast`]) and `--builtin accelerated` (the candle model,
//! [`super::accelerated`]). Reading a case's parameters and inputs, and turning a result into a
//! reply, is the same for both; only the evaluation differs, so neither adapter imports the
//! other. spec: [proto.reply]

use std::collections::BTreeMap;

use fire_kernels::{Activation, FireParams, Linear, Mlp, Threshold, Transform};

use crate::implementation::{Capabilities, Reply, Request};
use crate::vectors::format::{self, BaselineParams, Encoding, Inputs, Tensor};
use crate::vectors::params::check_tensor;

/// A bias `[H, Q, K]`, row-major f32.
pub(crate) struct Bias {
    pub(crate) heads: usize,
    pub(crate) data: Vec<f32>,
}

pub(crate) fn skip(why: impl Into<String>) -> Reply {
    Reply::Skipped(why.into())
}

pub(crate) fn errored(e: impl std::fmt::Display) -> Reply {
    Reply::Errored(e.to_string())
}

/// An activation by its spec name; the FIRE activations only (the reference's wider family
/// serves the Theorem 3.1 constructions, which these implementations skip).
fn activation(name: &str, what: &str) -> Result<Activation, Reply> {
    Activation::parse(name).ok_or_else(|| skip(format!("{what} `{name}` is not one of FIRE's")))
}

/// A FIRE module of the suite as plain numbers: f_θ (layers in `nn.Linear` layout) and the
/// scalars, checked as any implementation must. spec: [fire.params], [fire.mlp]
pub(crate) fn fire(p: &format::FireParams) -> Result<(Mlp, FireParams), Reply> {
    let mut layers = Vec::with_capacity(p.mlp.layers.len());
    for (n, l) in p.mlp.layers.iter().enumerate() {
        check_tensor("weight", &l.weight).map_err(errored)?;
        check_tensor("bias", &l.bias).map_err(errored)?;
        let [out, inp] = l.weight.shape[..] else {
            return Err(errored(format!("layer {n}: weight must have two axes")));
        };
        layers.push(
            Linear::new(l.weight.data.clone(), l.bias.data.clone(), inp, out).map_err(errored)?,
        );
    }
    let final_activation = match &p.mlp.final_activation {
        None => None,
        Some(a) => Some(activation(a, "final activation")?),
    };
    let mlp = Mlp::new(
        layers,
        activation(&p.mlp.activation, "activation")?,
        final_activation,
    )
    .map_err(errored)?;
    let params = FireParams {
        c: p.c,
        l_init: p.l_init,
        l_multiplier: p.l_multiplier,
        eps: p.eps,
        transform: Transform::parse(&p.transform)
            .ok_or_else(|| errored(format!("unknown transform `{}`", p.transform)))?,
        threshold: Threshold::parse(&p.threshold)
            .ok_or_else(|| errored(format!("unknown threshold `{}`", p.threshold)))?,
    };
    Ok((mlp, params))
}

pub(crate) fn setting(b: &BaselineParams, key: &str) -> Result<i64, Reply> {
    b.settings
        .get(key)
        .copied()
        .ok_or_else(|| errored(format!("{}: setting `{key}` is missing", b.name)))
}

pub(crate) fn count(b: &BaselineParams, key: &str) -> Result<usize, Reply> {
    usize::try_from(setting(b, key)?)
        .map_err(|_| errored(format!("{}: setting `{key}` must be >= 0", b.name)))
}

pub(crate) fn tensor<'a>(b: &'a BaselineParams, key: &str) -> Result<&'a Tensor, Reply> {
    let t = b
        .params
        .get(key)
        .ok_or_else(|| errored(format!("{}: parameter `{key}` is missing", b.name)))?;
    check_tensor(key, t).map_err(errored)?;
    Ok(t)
}

pub(crate) fn vector(b: &BaselineParams, key: &str) -> Result<Vec<f64>, Reply> {
    let t = tensor(b, key)?;
    if t.shape.len() != 1 {
        return Err(errored(format!("{}: `{key}` must have one axis", b.name)));
    }
    Ok(t.data.clone())
}

pub(crate) fn to_f64(v: &[f32]) -> Vec<f64> {
    v.iter().copied().map(f64::from).collect()
}

/// An attention input `[H, rows, dim]` as f32 rows per head.
pub(crate) fn attention_input(
    name: &str,
    t: &Option<Tensor>,
    heads: usize,
) -> Result<(usize, Vec<f32>), Reply> {
    let t = t
        .as_ref()
        .ok_or_else(|| errored(format!("attention input `{name}` is missing")))?;
    check_tensor(name, t).map_err(errored)?;
    match t.shape[..] {
        [h, _, d] if h == heads => Ok((d, t.data.iter().map(|&x| x as f32).collect())),
        _ => Err(errored(format!(
            "attention input `{name}` must be [{heads}, rows, dim], got {:?}",
            t.shape
        ))),
    }
}

/// The `bias` output of a case: `[H, Q, K]` for one FIRE module or a baseline, and
/// `[layers, H, Q, K]` for FIRE-S and per-layer FIRE. spec: [vec.encoding]
pub(crate) fn bias_output(encoding: &Encoding, layers: &[Bias], q: usize, k: usize) -> Tensor {
    match (encoding, layers) {
        (Encoding::Fire(_) | Encoding::Baseline(_), [b, ..]) => {
            Tensor::new(vec![b.heads, q, k], to_f64(&b.data))
        }
        _ => stacked(layers, q, k),
    }
}

/// One bias per layer as the suite's `[layers, H, Q, K]`.
fn stacked(layers: &[Bias], q: usize, k: usize) -> Tensor {
    let heads = layers.first().map_or(0, |b| b.heads);
    Tensor::new(
        vec![layers.len(), heads, q, k],
        layers.iter().flat_map(|b| to_f64(&b.data)).collect(),
    )
}

/// A vector-Jacobian product case's cotangent, which must be `[H, Q, K]`. spec: [grad.vjp]
pub(crate) fn cotangent(inputs: &Inputs, shape: [usize; 3]) -> Result<&Tensor, Reply> {
    let cot = inputs
        .cotangent
        .as_ref()
        .ok_or_else(|| errored("vjp: `cotangent` is missing"))?;
    check_tensor("cotangent", cot).map_err(errored)?;
    if cot.shape != shape {
        return Err(errored(format!(
            "cotangent must be {shape:?}, got {:?}",
            cot.shape
        )));
    }
    Ok(cot)
}

/// Query and key positions of a request, as `u64`.
pub(crate) fn positions(r: &Request) -> Result<(Vec<u64>, Vec<u64>), Reply> {
    let convert = |what: &str, v: &[i64]| {
        v.iter()
            .map(|&x| u64::try_from(x))
            .collect::<Result<Vec<u64>, _>>()
            .map_err(|_| errored(format!("{what}: negative position")))
    };
    Ok((
        convert("query positions", &r.inputs.queries)?,
        convert("key positions", &r.inputs.keys)?,
    ))
}

/// What an in-process f32 implementation of this workspace declares: every family, f32, the
/// spec's conventions.
pub(crate) fn f32_capabilities(name: &str) -> Capabilities {
    Capabilities {
        name: name.into(),
        families: vec!["*".into()],
        dtypes: vec!["f32".into()],
        future_keys: Default::default(),
        placement: Default::default(),
        positions: Default::default(),
        state: Default::default(),
    }
}

/// An evaluation's outputs, or the reply that stopped it.
pub(crate) fn reply(result: Result<BTreeMap<String, Tensor>, Reply>) -> Reply {
    result.map_or_else(|r| r, Reply::Output)
}
