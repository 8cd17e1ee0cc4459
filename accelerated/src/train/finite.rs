//! Finding non-finite values, and naming parameters in words a user knows.
//!
//! A diverging run must stop before its next forward pass sees a NaN weight (the fused kernels
//! would refuse it with their own internal names) and before any checkpoint stores one; a
//! checkpoint holding one must be refused on load by the parameter's name.

use candle_core::{DType, Tensor};

use crate::error::Result;

/// A non-finite value: where it is and what it is.
#[derive(Debug, Clone, PartialEq)]
pub struct NonFinite {
    /// The state-dict name of the tensor.
    pub name: String,
    /// The flat (row-major) index of the first non-finite element.
    pub index: usize,
    /// Its value (NaN, inf or -inf).
    pub value: f64,
}

impl std::fmt::Display for NonFinite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` ({}) holds {} at element {}",
            self.name,
            describe(&self.name),
            words(self.value),
            self.index
        )
    }
}

/// A float as a message shows it: `NaN`, `inf`, `-inf`, or the number.
pub fn words(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_finite() {
        // A diverging loss reaches 1e15 before it overflows: scientific notation keeps the
        // message readable; ordinary values keep four decimals.
        if v != 0.0 && !(1e-3..1e5).contains(&v.abs()) {
            format!("{v:.4e}")
        } else {
            format!("{v:.4}")
        }
    } else if v > 0.0 {
        "inf".into()
    } else {
        "-inf".into()
    }
}

/// The first non-finite element of `tensors`, in the order given. One reduction per tensor and
/// one transfer in all on the common path (every sum finite); only a tensor whose sum is not
/// finite is read element by element.
pub fn first_nonfinite<'a>(
    tensors: impl IntoIterator<Item = (&'a str, &'a Tensor)>,
) -> Result<Option<NonFinite>> {
    let tensors: Vec<(&str, &Tensor)> = tensors.into_iter().collect();
    if tensors.is_empty() {
        return Ok(None);
    }
    let sums = tensors
        .iter()
        .map(|(_, t)| t.to_dtype(DType::F32)?.sum_all())
        .collect::<candle_core::Result<Vec<_>>>()?;
    let sums: Vec<f32> = Tensor::stack(&sums, 0)?.to_vec1()?;
    for ((name, t), sum) in tensors.iter().zip(sums) {
        if sum.is_finite() {
            continue;
        }
        let values: Vec<f32> = t.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
        // A sum can overflow with every element finite; then this tensor is fine.
        if let Some(index) = values.iter().position(|v| !v.is_finite()) {
            return Ok(Some(NonFinite {
                name: (*name).to_owned(),
                index,
                value: f64::from(values[index]),
            }));
        }
    }
    Ok(None)
}

/// The first non-finite element of a safetensors view (f32, f64, f16 and bf16 are checked;
/// integer tensors cannot hold one).
pub(crate) fn first_nonfinite_view(
    name: &str,
    view: &safetensors::tensor::TensorView<'_>,
) -> Option<NonFinite> {
    use safetensors::Dtype;
    let data = view.data();
    let found = match view.dtype() {
        Dtype::F32 => data
            .chunks_exact(4)
            .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .enumerate()
            .find(|(_, v)| !v.is_finite()),
        Dtype::F64 => data
            .chunks_exact(8)
            .map(|c| {
                let mut b = [0u8; 8];
                b.copy_from_slice(c);
                f64::from_le_bytes(b)
            })
            .enumerate()
            .find(|(_, v)| !v.is_finite()),
        // Half precision: exponent bits all ones is inf or NaN.
        Dtype::F16 => half_nonfinite(data, 0x7c00, |bits| {
            if bits & 0x03ff != 0 {
                f64::NAN
            } else if bits & 0x8000 != 0 {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            }
        }),
        Dtype::BF16 => half_nonfinite(data, 0x7f80, |bits| {
            if bits & 0x007f != 0 {
                f64::NAN
            } else if bits & 0x8000 != 0 {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            }
        }),
        _ => None,
    };
    found.map(|(index, value)| NonFinite {
        name: name.to_owned(),
        index,
        value,
    })
}

fn half_nonfinite(data: &[u8], exponent: u16, value: impl Fn(u16) -> f64) -> Option<(usize, f64)> {
    data.chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .enumerate()
        .find(|(_, bits)| bits & exponent == exponent)
        .map(|(i, bits)| (i, value(bits)))
}

/// A state-dict name in a user's words: `layers.2.attn.fire.mlp.0.weight` is "FIRE mlp.0.weight
/// of layer 2". Names this does not know are returned as they are.
pub fn describe(name: &str) -> String {
    let parts: Vec<&str> = name.split('.').collect();
    let rest = |from: usize| parts.get(from..).map_or_else(String::new, |p| p.join("."));
    match parts.as_slice() {
        ["layers", l, "attn", "fire", ..] => format!("FIRE {} of layer {l}", rest(4)),
        ["layers", l, "attn", "kerple", ..] => format!("Kerple {} of layer {l}", rest(4)),
        ["layers", l, "attn", ..] => format!("attention {} of layer {l}", rest(3)),
        ["layers", l, "mlp", ..] => format!("feed-forward {} of layer {l}", rest(3)),
        ["layers", l, norm, ..] if norm.starts_with("ln") => {
            format!("layer norm {} of layer {l}", rest(2))
        }
        ["layers", l, ..] => format!("{} of layer {l}", rest(2)),
        ["fire", ..] => format!("FIRE-S {} (shared by every layer)", rest(1)),
        ["rel_pos", ..] => format!("T5 bias {} (shared by every layer)", rest(1)),
        ["embed", ..] => format!("token embedding {}", rest(1)),
        ["ln_f", ..] => format!("final layer norm {}", rest(1)),
        ["lm_head", ..] => format!("output head {}", rest(1)),
        [opt @ ("m" | "v"), ..] => {
            let moment = if *opt == "m" { "first" } else { "second" };
            format!("AdamW {moment} moment of {}", describe(&rest(1)))
        }
        _ => name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::describe;

    #[test]
    fn names_read_as_words() {
        assert_eq!(
            describe("layers.2.attn.fire.mlp.0.weight"),
            "FIRE mlp.0.weight of layer 2"
        );
        assert_eq!(
            describe("layers.0.attn.q_proj.weight"),
            "attention q_proj.weight of layer 0"
        );
        assert_eq!(
            describe("layers.1.mlp.fc2.bias"),
            "feed-forward fc2.bias of layer 1"
        );
        assert_eq!(describe("fire.c"), "FIRE-S c (shared by every layer)");
        assert_eq!(
            describe("v.layers.3.attn.fire.L_multiplier"),
            "AdamW second moment of FIRE L_multiplier of layer 3"
        );
        assert_eq!(describe("something"), "something");
    }

    #[test]
    fn values_read_as_words() {
        use super::words;
        assert_eq!(words(f64::NAN), "NaN");
        assert_eq!(words(f64::NEG_INFINITY), "-inf");
        assert_eq!(words(2.5), "2.5000");
        assert_eq!(words(1.3663928e15), "1.3664e15");
    }
}
