//! Conversions between the vector format's parameters and the reference's FIRE structs.
//!
//! Reading a file never trusts it: shapes, names and positions are checked here and turned into
//! typed reference errors, which an implementation reports as a rejection. spec: [vec.encoding]

use nalgebra::{DMatrix, DVector};

use fire_reference::fire::{Activation, Fire, Linear, Mlp, Threshold, Transform};
use fire_reference::{Error, Position, Result};

use super::format::{FireParams, LinearParams, MlpParams, Tensor};

fn invalid(what: &str, reason: impl Into<String>) -> Error {
    Error::Invalid {
        what: what.into(),
        reason: reason.into(),
    }
}

/// Checks that `data` holds exactly `product(shape)` values. spec: [vec.tensor]
pub fn check_tensor(what: &str, t: &Tensor) -> Result<()> {
    match t.numel() {
        Some(n) if n == t.data.len() => Ok(()),
        _ => Err(Error::Shape {
            what: what.into(),
            expected: format!(
                "{} values for shape {:?}",
                t.numel().unwrap_or(usize::MAX),
                t.shape
            ),
            got: format!("{} values", t.data.len()),
        }),
    }
}

/// A matrix from a `[rows, cols]` row-major tensor.
pub fn matrix(what: &str, t: &Tensor) -> Result<DMatrix<f64>> {
    check_tensor(what, t)?;
    match t.shape[..] {
        [r, c] => Ok(DMatrix::from_row_slice(r, c, &t.data)),
        _ => Err(Error::Shape {
            what: what.into(),
            expected: "2 axes".into(),
            got: format!("{:?}", t.shape),
        }),
    }
}

fn vector(what: &str, t: &Tensor) -> Result<DVector<f64>> {
    check_tensor(what, t)?;
    match t.shape[..] {
        [n] => Ok(DVector::from_column_slice(&t.data[..n])),
        _ => Err(Error::Shape {
            what: what.into(),
            expected: "1 axis".into(),
            got: format!("{:?}", t.shape),
        }),
    }
}

/// A row-major tensor from a matrix.
pub fn from_matrix(m: &DMatrix<f64>) -> Tensor {
    let data = (0..m.nrows())
        .flat_map(|r| m.row(r).iter().copied().collect::<Vec<_>>())
        .collect();
    Tensor::new(vec![m.nrows(), m.ncols()], data)
}

/// Parses an activation name of [fire.activation].
pub fn activation(name: &str) -> Result<Activation> {
    Ok(match name {
        "relu" => Activation::Relu,
        "gelu" => Activation::Gelu,
        "identity" => Activation::Identity,
        "heaviside" => Activation::Heaviside,
        "log1p" => Activation::Log1p,
        "cos" => Activation::Cos,
        other => {
            let p = other
                .strip_prefix("power(")
                .and_then(|r| r.strip_suffix(')'))
                .and_then(|p| p.parse::<f64>().ok())
                .ok_or_else(|| invalid("activation", format!("unknown activation `{other}`")))?;
            Activation::Power(p)
        }
    })
}

/// A reference FIRE module from file parameters. spec: [fire.params]
pub fn to_fire(p: &FireParams) -> Result<Fire> {
    let layers = p
        .mlp
        .layers
        .iter()
        .enumerate()
        .map(|(n, l)| {
            Ok(Linear::new(
                matrix(&format!("mlp layer {n} weight"), &l.weight)?,
                vector(&format!("mlp layer {n} bias"), &l.bias)?,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let final_activation = p
        .mlp
        .final_activation
        .as_deref()
        .map(activation)
        .transpose()?;
    Ok(Fire {
        mlp: Mlp {
            layers,
            activation: activation(&p.mlp.activation)?,
            final_activation,
        },
        c: p.c,
        l_init: p.l_init,
        l_multiplier: p.l_multiplier,
        eps: p.eps,
        transform: match p.transform.as_str() {
            "log" => Transform::Log,
            "identity" => Transform::Identity,
            other => return Err(invalid("transform", format!("unknown transform `{other}`"))),
        },
        threshold: match p.threshold.as_str() {
            "learnable" => Threshold::Learnable,
            "fixed" => Threshold::Fixed,
            "disabled" => Threshold::Disabled,
            other => {
                return Err(invalid(
                    "threshold",
                    format!("unknown threshold mode `{other}`"),
                ))
            }
        },
    })
}

/// File parameters from a reference FIRE module.
pub fn from_fire(f: &Fire) -> FireParams {
    FireParams {
        mlp: MlpParams {
            activation: f.mlp.activation.name(),
            final_activation: f.mlp.final_activation.map(|a| a.name()),
            layers: f
                .mlp
                .layers
                .iter()
                .map(|l| LinearParams {
                    weight: from_matrix(&l.weight),
                    bias: Tensor::new(vec![l.bias.len()], l.bias.iter().copied().collect()),
                })
                .collect(),
        },
        c: f.c,
        l_init: f.l_init,
        l_multiplier: f.l_multiplier,
        eps: f.eps,
        transform: match f.transform {
            Transform::Log => "log",
            Transform::Identity => "identity",
        }
        .into(),
        threshold: match f.threshold {
            Threshold::Learnable => "learnable",
            Threshold::Fixed => "fixed",
            Threshold::Disabled => "disabled",
        }
        .into(),
    }
}

/// Positions as the reference's unsigned type; a negative one is an error. spec: [conv.positions]
pub fn positions(what: &str, ps: &[i64]) -> Result<Vec<Position>> {
    ps.iter()
        .map(|&p| {
            Position::try_from(p).map_err(|_| invalid(what, format!("position {p} is negative")))
        })
        .collect()
}

/// Appendix E's parameter names for layer `n` of the MLP: `mlp.{2n}` (`nn.Sequential` numbers the
/// activations too). spec: [grad.layout]
pub fn layer_name(n: usize) -> String {
    format!("mlp.{}", 2 * n)
}
