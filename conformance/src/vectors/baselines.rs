//! Baseline encodings named in vector files, built from the reference's types.
//!
//! A `baseline` encoding carries its name, integer `settings` and real `params` tensors; this is
//! the one place that maps them onto spec/baselines.md. spec: [vec.encoding]

use fire_reference::baselines::{
    Alibi, KerpleLog, KerplePower, Nope, OfficialBucketing, Pairing, Rope, SandwichCentred,
    SandwichPaper, T5Buckets, T5Official, T5Simplified,
};
use fire_reference::bias::{evaluate, AdditiveBias, Bias};
use fire_reference::variants::{self, Variant};
use fire_reference::{Error, Position, Result};

use super::format::{BaselineParams, Tensor};
use super::params::check_tensor;

fn invalid(what: &str, reason: impl Into<String>) -> Error {
    Error::Invalid {
        what: what.into(),
        reason: reason.into(),
    }
}

fn setting(b: &BaselineParams, key: &str) -> Result<i64> {
    b.settings
        .get(key)
        .copied()
        .ok_or_else(|| invalid(&b.name, format!("setting `{key}` is missing")))
}

fn unsigned(b: &BaselineParams, key: &str) -> Result<u64> {
    u64::try_from(setting(b, key)?)
        .map_err(|_| invalid(&b.name, format!("setting `{key}` must be ≥ 0")))
}

fn tensor<'a>(b: &'a BaselineParams, key: &str) -> Result<&'a Tensor> {
    let t = b
        .params
        .get(key)
        .ok_or_else(|| invalid(&b.name, format!("parameter `{key}` is missing")))?;
    check_tensor(key, t)?;
    Ok(t)
}

fn vector(b: &BaselineParams, key: &str) -> Result<Vec<f64>> {
    let t = tensor(b, key)?;
    if t.shape.len() != 1 {
        return Err(invalid(&b.name, format!("`{key}` must have one axis")));
    }
    Ok(t.data.clone())
}

fn scalar(b: &BaselineParams, key: &str) -> Result<f64> {
    let t = tensor(b, key)?;
    match t.data[..] {
        [v] if t.shape.is_empty() => Ok(v),
        _ => Err(invalid(&b.name, format!("`{key}` must be a scalar"))),
    }
}

fn rows(b: &BaselineParams, key: &str) -> Result<Vec<Vec<f64>>> {
    let t = tensor(b, key)?;
    match t.shape[..] {
        [h, n] if n > 0 => Ok((0..h)
            .map(|r| t.data[r * n..(r + 1) * n].to_vec())
            .collect()),
        _ => Err(invalid(
            &b.name,
            format!("`{key}` must be [heads, n] with n > 0"),
        )),
    }
}

fn boundaries(b: &BaselineParams) -> Result<Vec<u64>> {
    vector(b, "boundaries")?
        .into_iter()
        .map(|v| {
            if v >= 0.0 && v.fract() == 0.0 && v <= 9.007_199_254_740_992e15 {
                Ok(v as u64)
            } else {
                Err(invalid(
                    &b.name,
                    format!("boundary {v} is not a non-negative integer"),
                ))
            }
        })
        .collect()
}

fn u32_setting(b: &BaselineParams, key: &str) -> Result<u32> {
    u32::try_from(unsigned(b, key)?)
        .map_err(|_| invalid(&b.name, format!("setting `{key}` is too large")))
}

fn heads(b: &BaselineParams) -> Result<usize> {
    usize::try_from(unsigned(b, "heads")?)
        .map_err(|_| invalid(&b.name, "setting `heads` is too large"))
}

/// The official-T5 encoding a baseline case names, if it names one.
pub fn official(b: &BaselineParams) -> Result<Option<T5Official>> {
    (b.name == "t5-official")
        .then(|| t5_official(b))
        .transpose()
}

fn t5_official(b: &BaselineParams) -> Result<T5Official> {
    Ok(T5Official {
        bucketing: OfficialBucketing::new(
            u32_setting(b, "num_buckets")?,
            unsigned(b, "max_distance")?,
            setting(b, "bidirectional")? != 0,
        )?,
        values: rows(b, "values")?,
    })
}

/// The bias of a baseline case, optionally through a named deviation (the baselines the
/// catalogue has deviations for read it; the others are evaluated as they are).
/// spec: [variants.catalogue]
pub fn bias(
    b: &BaselineParams,
    variant: Option<&Variant>,
    queries: &[Position],
    keys: &[Position],
) -> Result<Bias> {
    match b.name.as_str() {
        "t5-official" => variants::t5_bias(&t5_official(b)?, variant, queries, keys),
        "alibi-standard" => evaluate(
            &variants::alibi_standard(heads(b)?, variant)?,
            queries,
            keys,
        ),
        "kerple-log" => variants::kerple_log_bias(
            &KerpleLog {
                r1: vector(b, "r1")?,
                r2: vector(b, "r2")?,
            },
            variant,
            queries,
            keys,
        ),
        "kerple-power" => variants::kerple_power_bias(
            &KerplePower {
                r1: vector(b, "r1")?,
                r2: vector(b, "r2")?,
            },
            variant,
            queries,
            keys,
        ),
        _ => evaluate(build(b)?.as_ref(), queries, keys),
    }
}

/// The reference encoding a baseline case names (every additive baseline).
pub fn build(b: &BaselineParams) -> Result<Box<dyn AdditiveBias>> {
    Ok(match b.name.as_str() {
        "t5-simplified" => Box::new(T5Simplified {
            cap: unsigned(b, "cap")?,
            values: rows(b, "values")?,
        }),
        "t5-buckets" => Box::new(T5Buckets {
            boundaries: boundaries(b)?,
            values: rows(b, "values")?,
        }),
        "t5-official" => Box::new(t5_official(b)?),
        "alibi" => Box::new(Alibi {
            slopes: vector(b, "slopes")?,
        }),
        "alibi-standard" => Box::new(Alibi::standard(heads(b)?)?),
        "kerple-log" => Box::new(KerpleLog {
            r1: vector(b, "r1")?,
            r2: vector(b, "r2")?,
        }),
        "kerple-power" => Box::new(KerplePower {
            r1: vector(b, "r1")?,
            r2: vector(b, "r2")?,
        }),
        "sandwich-paper" => Box::new(SandwichPaper {
            r1: vector(b, "r1")?,
            r2: u32_setting(b, "r2")?,
            dim: scalar(b, "dim")?,
        }),
        "sandwich-centred" => Box::new(SandwichCentred {
            heads: heads(b)?,
            head_dim: u32_setting(b, "head_dim")?,
        }),
        "nope" => Box::new(Nope { heads: heads(b)? }),
        "rope" => {
            return Err(invalid(
                "rope",
                "RoPE is not an additive bias: it has attention cases only",
            ))
        }
        other => return Err(invalid("baseline", format!("unknown baseline `{other}`"))),
    })
}

/// RoPE (and RoPE-PI) from a `rope` baseline encoding. spec: [rope.rotation], [rope.pi]
pub fn rope(b: &BaselineParams) -> Result<Rope> {
    let r = Rope {
        base: scalar(b, "base")?,
        scale: scalar(b, "scale")?,
        pairing: match setting(b, "interleaved")? {
            0 => Pairing::HalfSplit,
            1 => Pairing::Interleaved,
            v => {
                return Err(invalid(
                    "rope",
                    format!("setting `interleaved` must be 0 or 1, got {v}"),
                ))
            }
        },
    };
    r.validate()?;
    Ok(r)
}
