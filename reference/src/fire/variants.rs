//! The catalogue of named deviations: the ways implementations get FIRE wrong.
//!
//! Each entry is one small function that computes what a particular mistake computes, and one
//! line in [`CATALOGUE`]. The conformance harness evaluates a failing implementation's cases
//! under every entry and names the one its outputs match. spec: [variants.catalogue]

use nalgebra::DVector;

use crate::bias::{AdditiveBias, Pair};
use crate::error::Result;
use crate::fire::transform::psi;
use crate::fire::{Activation, Fire, Threshold, Transform};
use crate::positions::{as_real, Indexing};

/// A named deviation from [fire.bias]. spec: [variants.catalogue]
#[derive(Debug, Clone, Copy)]
pub struct Variant {
    /// The stable name reported by the harness.
    pub name: &'static str,
    /// One sentence: what the mistaken implementation does.
    pub summary: &'static str,
    /// The clause the mistake violates.
    pub violates: &'static str,
    /// b(i, j) as the mistaken implementation computes it.
    pub bias: fn(&Fire, Pair) -> DVector<f64>,
}

/// Every known deviation, in the order the harness tries them. spec: [variants.catalogue]
#[rustfmt::skip]
pub const CATALOGUE: &[Variant] = &[
    v("one-based-positions", "positions start at 1 (the paper's prose) instead of 0", "conv.indexing", one_based),
    v("normalize-by-length", "normalises by the context length instead of the query position", "fire.normalizer", by_length),
    v("normalize-by-key", "normalises by the key position, which is also what a transposed bias b(j, i) computes", "fire.normalizer", by_key),
    v("eps-missing", "omits ε from the normaliser", "fire.normalizer", eps_missing),
    v("eps-inside-log", "adds ε to max(i, L) inside ψ instead of to ψ", "fire.normalizer", eps_inside_log),
    v("eps-twice", "adds ε to the numerator as well as the normaliser", "fire.input", eps_twice),
    v("no-abs-c", "uses ln(c·x + 1) without |c|", "fire.psi", no_abs_c),
    v("no-abs-threshold", "uses L = m·L_init without the absolute value", "fire.threshold", no_abs_threshold),
    v("threshold-ignored", "normalises by ψ(i) + ε, ignoring L", "fire.normalizer", threshold_ignored),
    v("log-without-plus-one", "uses ln(|c|·x) instead of ln(|c|·x + 1)", "fire.psi", log_without_plus_one),
    v("log-base-2", "uses log₂ in ψ (the ratio cancels the base, ε does not)", "fire.psi", log_base_2),
    v("difference-of-logs", "feeds ψ(|i−j|) − ψ(max(i, L)) instead of their ratio", "fire.input", difference_of_logs),
    v("no-hidden-activation", "drops σ between the MLP layers", "fire.mlp", no_hidden_activation),
    v("final-relu", "applies a ReLU to the MLP output", "fire.mlp", final_relu),
    v("weights-column-major", "reads each [out, in] weight buffer as column-major", "fire.mlp", weights_column_major),
    v("heads-reversed", "emits the heads in reverse order", "conv.layout", heads_reversed),
    v("gelu-tanh", "uses the tanh approximation of GeLU where the exact form is specified", "fire.activation", gelu_tanh),
];

#[allow(clippy::type_complexity)]
const fn v(
    name: &'static str,
    summary: &'static str,
    violates: &'static str,
    bias: fn(&Fire, Pair) -> DVector<f64>,
) -> Variant {
    Variant {
        name,
        summary,
        violates,
        bias,
    }
}

/// Looks a variant up by name.
pub fn find(name: &str) -> Option<&'static Variant> {
    CATALOGUE.iter().find(|v| v.name == name)
}

/// A FIRE module evaluated through a deviation: an [`AdditiveBias`] for [`crate::evaluate`].
#[derive(Debug, Clone, Copy)]
pub struct Deviating<'a> {
    /// The parameters.
    pub fire: &'a Fire,
    /// The mistake.
    pub variant: &'a Variant,
}

impl AdditiveBias for Deviating<'_> {
    fn heads(&self) -> usize {
        self.fire.heads()
    }

    fn validate(&self) -> Result<()> {
        self.fire.validate()
    }

    fn bias(&self, pair: Pair) -> DVector<f64> {
        (self.variant.bias)(self.fire, pair)
    }
}

fn ij(pair: Pair) -> (f64, f64) {
    (as_real(pair.i), as_real(pair.j))
}

/// ψ(|i−j|) / den through the correct MLP: the shared tail of most deviations.
fn with_normalizer(fire: &Fire, i: f64, j: f64, den: f64) -> DVector<f64> {
    fire.mlp
        .eval(psi(fire.transform, fire.c, (i - j).abs()) / den)
}

fn l_or_zero(fire: &Fire) -> f64 {
    fire.threshold_value().unwrap_or(0.0)
}

fn one_based(fire: &Fire, p: Pair) -> DVector<f64> {
    let shift = |q| as_real(Indexing::OneBased.apply(q));
    fire.bias_at(shift(p.i), shift(p.j))
}

fn by_length(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    let n = as_real(p.length).max(l_or_zero(fire));
    with_normalizer(fire, i, j, psi(fire.transform, fire.c, n) + fire.eps)
}

fn by_key(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    let n = j.max(l_or_zero(fire));
    with_normalizer(fire, i, j, psi(fire.transform, fire.c, n) + fire.eps)
}

fn eps_missing(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    let n = i.max(l_or_zero(fire));
    with_normalizer(fire, i, j, psi(fire.transform, fire.c, n))
}

fn eps_inside_log(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    let n = i.max(l_or_zero(fire)) + fire.eps;
    with_normalizer(fire, i, j, psi(fire.transform, fire.c, n))
}

fn eps_twice(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    let n = i.max(l_or_zero(fire));
    let num = psi(fire.transform, fire.c, (i - j).abs()) + fire.eps;
    fire.mlp
        .eval(num / (psi(fire.transform, fire.c, n) + fire.eps))
}

fn no_abs_c(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    let raw = |x: f64| match fire.transform {
        Transform::Log => (fire.c * x).ln_1p(),
        Transform::Identity => x,
    };
    let n = i.max(l_or_zero(fire));
    fire.mlp.eval(raw((i - j).abs()) / (raw(n) + fire.eps))
}

fn no_abs_threshold(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    let l = match fire.threshold {
        Threshold::Disabled => i,
        _ => fire.l_multiplier * fire.l_init,
    };
    with_normalizer(fire, i, j, psi(fire.transform, fire.c, i.max(l)) + fire.eps)
}

fn threshold_ignored(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    with_normalizer(fire, i, j, psi(fire.transform, fire.c, i) + fire.eps)
}

fn log_without_plus_one(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    let bad = |x: f64| (fire.c.abs() * x).ln();
    let n = i.max(l_or_zero(fire));
    fire.mlp.eval(bad((i - j).abs()) / (bad(n) + fire.eps))
}

fn log_base_2(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    let log2 = |x: f64| psi(fire.transform, fire.c, x) / std::f64::consts::LN_2;
    let n = i.max(l_or_zero(fire));
    fire.mlp.eval(log2((i - j).abs()) / (log2(n) + fire.eps))
}

fn difference_of_logs(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    let n = i.max(l_or_zero(fire));
    let x = psi(fire.transform, fire.c, (i - j).abs()) - psi(fire.transform, fire.c, n);
    fire.mlp.eval(x)
}

fn no_hidden_activation(fire: &Fire, p: Pair) -> DVector<f64> {
    let mut f = fire.clone();
    f.mlp.activation = Activation::Identity;
    f.bias(p)
}

fn final_relu(fire: &Fire, p: Pair) -> DVector<f64> {
    let mut f = fire.clone();
    f.mlp.final_activation = Some(Activation::Relu);
    f.bias(p)
}

fn weights_column_major(fire: &Fire, p: Pair) -> DVector<f64> {
    let mut f = fire.clone();
    for layer in &mut f.mlp.layers {
        let (rows, cols) = layer.weight.shape();
        // nalgebra stores column-major; the row-major buffer PyTorch writes is the transpose's.
        let row_major: Vec<f64> = layer.weight.transpose().iter().copied().collect();
        layer.weight = nalgebra::DMatrix::from_column_slice(rows, cols, &row_major);
    }
    f.bias(p)
}

fn heads_reversed(fire: &Fire, p: Pair) -> DVector<f64> {
    let b = fire.bias(p);
    let n = b.len();
    DVector::from_fn(n, |h, _| b[n - 1 - h])
}

fn gelu_tanh(fire: &Fire, p: Pair) -> DVector<f64> {
    let (i, j) = ij(p);
    let x = fire.input(i, j);
    // Re-run the MLP with the tanh form of GeLU wherever the exact form is configured.
    let tanh_gelu = |z: f64| {
        let k = (2.0 / std::f64::consts::PI).sqrt();
        0.5 * z * (1.0 + (k * (z + 0.044_715 * z * z * z)).tanh())
    };
    let last = fire.mlp.layers.len() - 1;
    let mut a = DVector::from_element(1, x);
    for (n, layer) in fire.mlp.layers.iter().enumerate() {
        let z = layer.apply(&a);
        let s = if n < last {
            Some(fire.mlp.activation)
        } else {
            fire.mlp.final_activation
        };
        a = match s {
            Some(Activation::Gelu) => z.map(tanh_gelu),
            Some(s) => z.map(|v| s.apply(v)),
            None => z,
        };
    }
    a
}
