//! What an implementation's declared conventions change in the expected output.
//!
//! The causal lower triangle (key ≤ query) is the core every implementation must match; the
//! upper triangle is checked under the declared [`FutureKeys`]. spec: [conv.future], [conv.causal]

use crate::implementation::FutureKeys;
use crate::vectors::format::{Inputs, Kind, Tensor};

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
        let q = (n / nk) % nq;
        let k = n % nk;
        if inputs.keys[k] > inputs.queries[q] {
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
        let (q, k) = ((n / nk) % nq, n % nk);
        if inputs.keys[k] > inputs.queries[q] && *v != 0.0 {
            *v = 0.0;
            changed = true;
        }
    }
    changed.then_some(out)
}
