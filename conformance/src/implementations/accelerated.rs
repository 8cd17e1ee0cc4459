//! The accelerated crate's FIRE (candle, f32 on the CPU) as a built-in implementation, checked
//! like any third party: `fire-conformance run --builtin accelerated` (cargo feature
//! `accelerated`). It answers bias cases of single FIRE modules and skips the rest.

use std::collections::BTreeMap;

use fire_accelerated::config::{Activation, Threshold, Transform};
use fire_accelerated::encodings::fire::{Fire, FireParams};

use crate::implementation::{Capabilities, Implementation, Reply, Request};
use crate::vectors::format::{Encoding, Kind, Tensor};
use crate::vectors::params::check_tensor;

/// `fire-accelerated` in process.
#[derive(Debug, Default)]
pub struct Accelerated;

fn activation(name: &str) -> Option<Activation> {
    Some(match name {
        "relu" => Activation::Relu,
        "gelu" => Activation::Gelu,
        "identity" => Activation::Identity,
        _ => return None,
    })
}

fn params(p: &crate::vectors::format::FireParams) -> Result<FireParams, Reply> {
    let skip = |why: &str| Reply::Skipped(why.into());
    let mut layers = Vec::new();
    for (n, l) in p.mlp.layers.iter().enumerate() {
        check_tensor("weight", &l.weight).map_err(|e| Reply::Errored(e.to_string()))?;
        let [out, inp] = l.weight.shape[..] else {
            return Err(Reply::Errored(format!(
                "layer {n}: weight must have two axes"
            )));
        };
        let f32s = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
        layers.push((f32s(&l.weight.data), out, inp, f32s(&l.bias.data)));
    }
    Ok(FireParams {
        layers,
        activation: activation(&p.mlp.activation)
            .ok_or_else(|| skip("activation not supported by the accelerated crate"))?,
        final_activation: match &p.mlp.final_activation {
            None => None,
            Some(a) => Some(activation(a).ok_or_else(|| skip("final activation not supported"))?),
        },
        c: p.c,
        l_init: p.l_init,
        l_multiplier: p.l_multiplier,
        eps: p.eps,
        transform: match p.transform.as_str() {
            "log" => Transform::Log,
            _ => Transform::Identity,
        },
        threshold: match p.threshold.as_str() {
            "learnable" => Threshold::Learnable,
            "fixed" => Threshold::Fixed,
            _ => Threshold::Disabled,
        },
    })
}

impl Implementation for Accelerated {
    fn capabilities(&mut self) -> anyhow::Result<Capabilities> {
        Ok(Capabilities {
            name: "fire-accelerated (candle, cpu)".into(),
            families: vec!["*".into()],
            dtypes: vec!["f32".into()],
            future_keys: Default::default(),
            placement: Default::default(),
        })
    }

    fn run(&mut self, r: &Request) -> Reply {
        let (Encoding::Fire(p), Kind::Bias) = (&r.encoding, r.kind) else {
            return Reply::Skipped("only bias cases of a single FIRE module".into());
        };
        let p = match params(p) {
            Ok(p) => p,
            Err(reply) => return reply,
        };
        let positions = |v: &[i64]| {
            v.iter()
                .map(|&x| u64::try_from(x))
                .collect::<Result<Vec<u64>, _>>()
        };
        let (Ok(q), Ok(k)) = (positions(&r.inputs.queries), positions(&r.inputs.keys)) else {
            return Reply::Errored("negative position".into());
        };
        let device = candle_core::Device::Cpu;
        let result = Fire::from_params(&p, &device).and_then(|f| {
            let data = f.bias(&q, &k)?;
            Ok((f.heads(), data))
        });
        match result {
            Ok((h, data)) => {
                let mut out = BTreeMap::new();
                out.insert(
                    "bias".to_owned(),
                    Tensor::new(
                        vec![h, q.len(), k.len()],
                        data.into_iter().map(f64::from).collect(),
                    ),
                );
                Reply::Output(out)
            }
            Err(e) => Reply::Errored(e.to_string()),
        }
    }
}
