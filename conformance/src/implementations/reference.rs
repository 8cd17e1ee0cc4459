//! The built-in reference implementation: `fire-reference`, in process.
//!
//! This is also the code path the generator uses to compute expected outputs, so "the reference
//! passes every vector" checks serialisation and loading end to end. spec: [vec.generation]

use std::collections::BTreeMap;

use nalgebra::DMatrix;

use fire_reference::attention::{self, HeadInputs};
use fire_reference::bias::Bias;
use fire_reference::fire::grad::{self, Subgradients};
use fire_reference::variants::{self, Variant};
use fire_reference::{Error, Fire, Position, Result};

use crate::implementation::{Capabilities, Implementation, Reply, Request};
use crate::vectors::format::{Encoding, Inputs, Kind, Tensor};
use crate::vectors::params::{self, check_tensor, layer_name};

/// The reference as an [`Implementation`].
#[derive(Debug, Default)]
pub struct Reference;

impl Implementation for Reference {
    fn capabilities(&mut self) -> crate::error::Result<Capabilities> {
        Ok(Capabilities {
            name: "fire-reference".into(),
            families: vec!["*".into()],
            dtypes: vec!["f64".into()],
            future_keys: Default::default(),
            placement: Default::default(),
            positions: Default::default(),
            state: Default::default(),
        })
    }

    fn run(&mut self, request: &Request) -> Reply {
        match evaluate_request(&request.encoding, request.kind, &request.inputs, None) {
            Ok(out) => Reply::Output(out),
            Err(e) => Reply::Errored(e.to_string()),
        }
    }
}

fn bias_tensor(b: &Bias) -> Tensor {
    Tensor::new(b.shape().to_vec(), b.to_row_major())
}

fn stacked(layers: &[Bias]) -> Tensor {
    let mut shape = vec![layers.len()];
    shape.extend(
        layers
            .first()
            .map(|b| b.shape().to_vec())
            .unwrap_or_default(),
    );
    Tensor::new(shape, layers.iter().flat_map(Bias::to_row_major).collect())
}

/// A FIRE module, possibly seen through a named deviation.
fn eval_fire(
    fire: &Fire,
    variant: Option<&Variant>,
    q: &[Position],
    k: &[Position],
) -> Result<Bias> {
    variants::fire_bias(fire, variant, q, k)
}

/// The bias of any encoding; FIRE-S and per-layer FIRE give one bias per layer.
fn layer_biases(
    encoding: &Encoding,
    variant: Option<&Variant>,
    q: &[Position],
    k: &[Position],
) -> Result<Vec<Bias>> {
    match encoding {
        Encoding::Fire(p) => Ok(vec![eval_fire(&params::to_fire(p)?, variant, q, k)?]),
        Encoding::FireShared(s) => {
            if s.layers == 0 {
                return Err(Error::Empty {
                    what: "FIRE-S layers".into(),
                });
            }
            let once = eval_fire(&params::to_fire(&s.module)?, variant, q, k)?;
            Ok(vec![once; s.layers])
        }
        Encoding::FirePerLayer(p) => {
            if p.modules.is_empty() {
                return Err(Error::Empty {
                    what: "FIRE layers".into(),
                });
            }
            // The first module in every layer's place, under `first-module-reused`.
            let reused = variant.is_some_and(Variant::reuses_first_module);
            (0..p.modules.len())
                .map(|l| p.modules[if reused { 0 } else { l }].clone())
                .map(|m| eval_fire(&params::to_fire(&m)?, variant, q, k))
                .collect()
        }
        Encoding::Baseline(b) => Ok(vec![crate::vectors::baselines::bias(b, variant, q, k)?]),
    }
}

fn head_inputs(inputs: &Inputs, heads: usize) -> Result<Vec<HeadInputs>> {
    let get = |name: &str, t: &Option<Tensor>| -> Result<Tensor> {
        let t = t.clone().ok_or_else(|| Error::Invalid {
            what: "attention inputs".into(),
            reason: format!("`{name}` is missing"),
        })?;
        check_tensor(name, &t)?;
        if t.shape.len() != 3 || t.shape[0] != heads {
            return Err(Error::Shape {
                what: format!("attention input `{name}`"),
                expected: format!("[{heads}, rows, dim]"),
                got: format!("{:?}", t.shape),
            });
        }
        Ok(t)
    };
    let (q, k, v) = (
        get("q", &inputs.q)?,
        get("k", &inputs.k)?,
        get("v", &inputs.v)?,
    );
    let head = |t: &Tensor, h: usize| {
        let (r, c) = (t.shape[1], t.shape[2]);
        DMatrix::from_row_slice(r, c, &t.data[h * r * c..(h + 1) * r * c])
    };
    Ok((0..heads)
        .map(|h| HeadInputs {
            q: head(&q, h),
            k: head(&k, h),
            v: head(&v, h),
        })
        .collect())
}

/// Attention outputs `[H, Q, d_v]` of `bias` (causal at the normative placement unless told).
pub fn attention_output(
    inputs: &Inputs,
    bias: &Bias,
    placement: attention::Placement,
    masking: attention::Masking,
) -> Result<Tensor> {
    let q = params::positions("query positions", &inputs.queries)?;
    let k = params::positions("key positions", &inputs.keys)?;
    let heads = head_inputs(inputs, bias.heads())?;
    let outs = attention::attend(&heads, bias, &q, &k, placement, masking)?;
    let (rows, dv) = outs.first().map_or((0, 0), |m| m.shape());
    let data = outs
        .iter()
        .flat_map(|m| (0..rows).flat_map(move |r| m.row(r).iter().copied().collect::<Vec<_>>()))
        .collect();
    Ok(Tensor::new(vec![outs.len(), rows, dv], data))
}

fn vjp(
    fire: &Fire,
    q: &[Position],
    k: &[Position],
    cot: &Option<Tensor>,
    sub: Subgradients,
) -> Result<BTreeMap<String, Tensor>> {
    let cot = cot.as_ref().ok_or_else(|| Error::Invalid {
        what: "vjp inputs".into(),
        reason: "`cotangent` is missing".into(),
    })?;
    check_tensor("cotangent", cot)?;
    let want = [fire.mlp.heads(), q.len(), k.len()];
    if cot.shape != want {
        return Err(Error::Shape {
            what: "cotangent".into(),
            expected: format!("{want:?}"),
            got: format!("{:?}", cot.shape),
        });
    }
    let heads = (0..want[0])
        .map(|h| {
            DMatrix::from_row_slice(
                want[1],
                want[2],
                &cot.data[h * want[1] * want[2]..(h + 1) * want[1] * want[2]],
            )
        })
        .collect();
    let g = grad::vjp_with(fire, q, k, &Bias::from_heads(heads)?, sub)?;
    let mut out = BTreeMap::new();
    for (n, (w, b)) in g.layers.iter().enumerate() {
        out.insert(format!("{}.weight", layer_name(n)), params::from_matrix(w));
        out.insert(
            format!("{}.bias", layer_name(n)),
            Tensor::new(vec![b.len()], b.iter().copied().collect()),
        );
    }
    out.insert("c".into(), Tensor::new(vec![], vec![g.c]));
    if fire.threshold == fire_reference::fire::Threshold::Learnable {
        out.insert(
            "L_multiplier".into(),
            Tensor::new(vec![], vec![g.l_multiplier]),
        );
    }
    Ok(out)
}

fn is_rope(e: &Encoding) -> bool {
    matches!(e, Encoding::Baseline(b) if b.name == "rope")
}

/// Causal attention with RoPE applied to every query and key row and no additive bias.
/// spec: [rope.score], [attn.causal]
fn rope_attention(
    encoding: &Encoding,
    inputs: &Inputs,
    q: &[Position],
    k: &[Position],
    placement: attention::Placement,
    masking: attention::Masking,
) -> Result<Tensor> {
    let Encoding::Baseline(b) = encoding else {
        return Err(Error::Invalid {
            what: "rope".into(),
            reason: "not a RoPE encoding".into(),
        });
    };
    let rope = crate::vectors::baselines::rope(b)?;
    let heads = inputs
        .q
        .as_ref()
        .map_or(0, |t| t.shape.first().copied().unwrap_or(0));
    let mut rotated = inputs.clone();
    for (name, positions) in [("q", q), ("k", k)] {
        let t = if name == "q" {
            &mut rotated.q
        } else {
            &mut rotated.k
        };
        let Some(t) = t.as_mut() else { continue };
        check_tensor(name, t)?;
        if t.shape.len() != 3 || t.shape[1] != positions.len() {
            return Err(Error::Shape {
                what: format!("attention input `{name}`"),
                expected: format!("[H, {}, d]", positions.len()),
                got: format!("{:?}", t.shape),
            });
        }
        let d = t.shape[2];
        for row in 0..t.shape[0] * t.shape[1] {
            let p = positions[row % t.shape[1]];
            let x = nalgebra::DVector::from_column_slice(&t.data[row * d..(row + 1) * d]);
            let y = rope.rotate(&x, fire_reference::positions::as_real(p))?;
            t.data[row * d..(row + 1) * d].copy_from_slice(y.as_slice());
        }
    }
    let zero = Bias::from_heads(vec![DMatrix::zeros(q.len(), k.len()); heads.max(1)])?;
    attention_output(&rotated, &zero, placement, masking)
}

/// A bias of zeros with `bias`'s heads and shape: what attention adds when the bias is dropped
/// ([`Variant::drops_bias`]). spec: [attn.logits]
fn zero_like(bias: &Bias) -> Result<Bias> {
    let heads = (0..bias.heads())
        .map(|h| {
            let m = bias.head(h);
            DMatrix::zeros(m.nrows(), m.ncols())
        })
        .collect();
    Bias::from_heads(heads)
}

/// Evaluates one case's request with the reference, optionally through a named deviation.
/// spec: [vec.generation]
pub fn evaluate_request(
    encoding: &Encoding,
    kind: Kind,
    inputs: &Inputs,
    variant: Option<&Variant>,
) -> Result<BTreeMap<String, Tensor>> {
    evaluate_placed(
        encoding,
        kind,
        inputs,
        variant,
        attention::Placement::AfterScaling,
    )
}

/// A FIRE gradient case's outputs with the sub-gradients `sub` at its kinks instead of the
/// spec's: what faithful code choosing another sub-gradient returns. spec: [grad.kinks]
pub fn evaluate_subgradients(
    encoding: &Encoding,
    inputs: &Inputs,
    sub: Subgradients,
) -> Result<BTreeMap<String, Tensor>> {
    let q = params::positions("query positions", &inputs.queries)?;
    let k = params::positions("key positions", &inputs.keys)?;
    match encoding {
        Encoding::Fire(p) => vjp(&params::to_fire(p)?, &q, &k, &inputs.cotangent, sub),
        _ => Err(Error::Invalid {
            what: "vjp case".into(),
            reason: "gradients are defined for a single FIRE module".into(),
        }),
    }
}

/// [`evaluate_request`] with an explicit bias placement for attention cases.
pub fn evaluate_placed(
    encoding: &Encoding,
    kind: Kind,
    inputs: &Inputs,
    variant: Option<&Variant>,
    placement: attention::Placement,
) -> Result<BTreeMap<String, Tensor>> {
    let q = params::positions("query positions", &inputs.queries)?;
    let k = params::positions("key positions", &inputs.keys)?;
    let placement = variant.map_or(placement, |v| v.placement(placement));
    let masking = variant.map_or(attention::Masking::Causal, Variant::masking);
    let mut out = BTreeMap::new();
    match kind {
        Kind::Bias => {
            let layers = layer_biases(encoding, variant, &q, &k)?;
            let t = match encoding {
                Encoding::Fire(_) | Encoding::Baseline(_) => bias_tensor(&layers[0]),
                _ => stacked(&layers),
            };
            out.insert("bias".into(), t);
        }
        Kind::Attention if is_rope(encoding) => {
            out.insert(
                "output".into(),
                rope_attention(encoding, inputs, &q, &k, placement, masking)?,
            );
        }
        Kind::Attention => {
            let mut layers = layer_biases(encoding, variant, &q, &k)?;
            if layers.len() != 1 {
                return Err(Error::Invalid {
                    what: "attention case".into(),
                    reason: "attention cases take a single-layer encoding".into(),
                });
            }
            let bias = match variant {
                Some(v) if v.drops_bias() => zero_like(&layers[0])?,
                _ => layers.swap_remove(0),
            };
            out.insert(
                "output".into(),
                attention_output(inputs, &bias, placement, masking)?,
            );
        }
        Kind::Vjp => match encoding {
            Encoding::Fire(p) if !variant.is_some_and(Variant::applies_to_fire) => {
                out = vjp(
                    &params::to_fire(p)?,
                    &q,
                    &k,
                    &inputs.cotangent,
                    Subgradients::SPEC,
                )?;
            }
            _ => {
                return Err(Error::Invalid {
                    what: "vjp case".into(),
                    reason: "gradients are defined for a single FIRE module".into(),
                })
            }
        },
    }
    Ok(out)
}
