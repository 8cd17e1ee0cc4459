//! What an implementation's declared conventions change in the expected output.
//!
//! The causal lower triangle (key ≤ query) is the core every implementation must match; the
//! upper triangle is checked under the declared [`FutureKeys`]. spec: [conv.future], [conv.causal]

use std::borrow::Cow;

use crate::implementation::{Capabilities, FutureKeys};
use crate::vectors::format::{Case, Inputs, Kind, Tensor};

/// The future-keys convention `case` is graded under: the implementation's declaration for
/// FIRE's encodings, whose keys after the query it concerns; `mirrored`, the values the case
/// holds, for the baselines, which define their own there (T5's bucket 0, Alibi's `|i − j|`).
/// spec: [conv.future]
pub fn future_keys(case: &Case, caps: &Capabilities) -> FutureKeys {
    if case.encoding.is_fire() {
        caps.future_keys
    } else {
        FutureKeys::Mirrored
    }
}

/// The largest value a `masked` module's bias may take at a key after its query and still read
/// as the mask. PyTorch and JAX models mask with `-inf`, `torch.finfo(dtype).min`, `-1e9`,
/// `-1e30`, or BERT's `-10000.0`, often *added* to the bias (`bias + mask`, which lands a little
/// above −10⁴) and in bf16 rounded (`-1e4` is −9 984 there). `exp` of anything ≤ −10³ is exactly
/// 0 in every float format the harness grades (f32 and bf16 underflow below ≈ −104, f64 below
/// −745), so each removes the key from the softmax exactly as −∞ does; the ceiling sits a decade
/// below that, far outside FIRE's range, so a bias value is never read as a mask.
/// spec: [conv.future]
pub const MASK_CEILING: f64 = -1e3;

/// Whether `v` is the mask under the `masked` convention: −∞ or a finite value at most
/// [`MASK_CEILING`] (never NaN). spec: [conv.future]
pub fn is_mask(v: f64) -> bool {
    v <= MASK_CEILING
}

/// Whether the `n`-th element of an output laid out `[.., Q, K]` over `inputs` is at a key
/// after its query.
fn after_query(inputs: &Inputs, n: usize) -> bool {
    let (nq, nk) = (inputs.queries.len(), inputs.keys.len());
    inputs.keys[n % nk] > inputs.queries[(n / nk) % nq]
}

/// `got` as its declared convention reads it: under `masked`, every value at a key after its
/// query that [`is_mask`] reads as −∞, the value the expected tensor holds there ([`adjust`]);
/// anything else (a value in FIRE's range, NaN) is left to fail the comparison as it stands.
/// spec: [conv.future]
pub fn as_declared<'a>(
    kind: Kind,
    inputs: &Inputs,
    got: &'a Tensor,
    future: FutureKeys,
) -> Cow<'a, Tensor> {
    let (nq, nk) = (inputs.queries.len(), inputs.keys.len());
    if kind != Kind::Bias
        || future != FutureKeys::Masked
        || nq * nk == 0
        || !got.data.len().is_multiple_of(nq * nk)
    {
        return Cow::Borrowed(got);
    }
    let mut out = got.clone();
    for (n, v) in out.data.iter_mut().enumerate() {
        if after_query(inputs, n) && is_mask(*v) {
            *v = f64::NEG_INFINITY;
        }
    }
    Cow::Owned(out)
}

/// The expected tensor under `future` and the elements to check, for an output of `kind`.
/// Bias tensors end in `[Q, K]`; other outputs are returned unchanged.
pub fn adjust(
    kind: Kind,
    inputs: &Inputs,
    want: &Tensor,
    future: FutureKeys,
) -> (Tensor, Option<Vec<bool>>) {
    if kind != Kind::Bias || future == FutureKeys::Mirrored {
        return (want.clone(), None);
    }
    let (nq, nk) = (inputs.queries.len(), inputs.keys.len());
    if nq * nk == 0 || !want.data.len().is_multiple_of(nq * nk) {
        return (want.clone(), None);
    }
    let mut out = want.clone();
    let mut check = vec![true; want.data.len()];
    for (n, v) in out.data.iter_mut().enumerate() {
        if after_query(inputs, n) {
            match future {
                FutureKeys::Zero => *v = 0.0,
                FutureKeys::Masked => *v = f64::NEG_INFINITY,
                FutureKeys::Negated => check[n] = false,
                FutureKeys::Mirrored => {}
            }
        }
    }
    (out, Some(check))
}

/// Only the causal elements: the mask that checks `key ≤ query` and nothing else.
pub fn causal_only(kind: Kind, inputs: &Inputs, want: &Tensor) -> Option<Vec<bool>> {
    adjust(kind, inputs, want, FutureKeys::Negated).1
}

/// How many elements of an output of `kind` the declared convention leaves unchecked: under
/// `negated`, every element at a key after its query; otherwise none. spec: [conv.future]
pub fn unchecked_under(kind: Kind, inputs: &Inputs, want: &Tensor, future: FutureKeys) -> usize {
    adjust(kind, inputs, want, future)
        .1
        .map_or(0, |check| check.iter().filter(|c| !**c).count())
}

/// The name under which a gradient case carries the gradients of its cotangent restricted to
/// the causal triangle ([`causal_cotangent`]). spec: [conv.future], [grad.vjp]
pub const CAUSAL_COTANGENT: &str = "cotangent=causal";

/// A gradient case's cotangent with every entry at a key after its query set to zero, or `None`
/// when there is no cotangent or nothing to zero.
///
/// A declared convention other than `mirrored` says the module's bias at those entries is not
/// the mirrored distance's (0, −∞, or unchecked), so its gradient there is not FIRE's either; the
/// harness asks for the gradient of the causal entries only, and grades it against the gradient
/// of the same restricted cotangent. spec: [conv.future], [grad.vjp]
pub fn causal_cotangent(inputs: &Inputs) -> Option<Tensor> {
    let cot = inputs.cotangent.as_ref()?;
    let (nq, nk) = (inputs.queries.len(), inputs.keys.len());
    if nq * nk == 0 || cot.data.len() % (nq * nk) != 0 {
        return None;
    }
    let mut out = cot.clone();
    let mut changed = false;
    for (n, v) in out.data.iter_mut().enumerate() {
        if after_query(inputs, n) && *v != 0.0 {
            *v = 0.0;
            changed = true;
        }
    }
    changed.then_some(out)
}
