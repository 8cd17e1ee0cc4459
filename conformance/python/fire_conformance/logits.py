"""fire_conformance.logits: what a module handed attention scores, or the query and key tensors
they are made from, must return. Given non-zero scores, the scores plus its bias, or (read only
for their shape) the bias alone (``check_scores``); given non-zero queries and keys, the bias
alone or the logits q·kᵀ/√d + bias (``check_states``). The glues' zero inputs alone would let a
module drop, rescale or leave unscaled what it is given. spec: [attn.logits], [attn.placement]
"""

import numpy as np

from fire_conformance import kit as fire_kit
from fire_conformance.calls import ROUNDING, SEED, unmasked


def scores_probe(shape):
    """Non-zero attention scores of ``shape`` ([B, H, T, T]) in float32, the same for every call
    of a shape: what a ``scores`` call hands the module besides zeros (``check_scores``)."""
    return np.random.default_rng(list(shape)).standard_normal(shape, dtype=np.float32)



# The head dimension of the query and key tensors a ``qk_states`` call is probed with: wide
# enough that 1/√d shows (the graded call's [B, H, n, 1] has d = 1).
STATE_DIM = 8


def states_probe(q_shape, k_shape):
    """Non-zero query and key tensors of a ``qk_states`` call's shapes ([B, H, n, 1] and [B, H, T,
    1], ``Plan.states``) widened to ``STATE_DIM``, float32, the same for every sequence of the
    batch: what ``check_states`` hands the module besides zeros."""
    rng = np.random.default_rng([SEED, *q_shape, *k_shape])
    q = rng.standard_normal((1,) + tuple(q_shape[1:3]) + (STATE_DIM,), dtype=np.float32)
    k = rng.standard_normal((1,) + tuple(k_shape[1:3]) + (STATE_DIM,), dtype=np.float32)
    return np.repeat(q, q_shape[0], axis=0), np.repeat(k, k_shape[0], axis=0)


def check_states(bias, probed, q, k, dtype, to_numpy=np.asarray):
    """Checks a ``qk_states`` call: ``bias`` [H, n, T] is the module's output for zero queries
    and keys, ``probed`` its raw output for the non-zero ``q`` [B, H, n, d] and ``k`` [B, H, T,
    d] (``states_probe``). A module reading only their lengths returns the bias again; one
    computing the attention logits returns q·kᵀ/√d + bias [attn.logits, attn.placement]. One
    returning q·kᵀ + bias has lost the 1/√d (given d = 1, as the graded call's tensors are, it
    could not show), and anything else changes the logits otherwise: both are refused saying so.
    Entries the bias masks are left out."""
    B, H, n, d = q.shape
    T = k.shape[2]
    got = np.asarray(to_numpy(probed), dtype=np.float64)
    if got.ndim == 3:
        got = got[None]
    if got.shape[1:] != (H, n, T):
        raise ScoresMisused(f"called with non-zero queries and keys {[B, H, n, d]} and {[B, H, T, d]}, "
                            f"the module returned shape {list(got.shape)}, though with zeros it returned a "
                            f"bias of [{H}, {n}, {T}]: its output's shape depends on their values")
    qk = np.einsum("bhnd,bhtd->bhnt", q.astype(np.float64), k.astype(np.float64))[: got.shape[0]]
    want = np.asarray(bias, dtype=np.float64)[None]
    keep = np.broadcast_to(unmasked(want), got.shape)
    scale = max(1.0, float(np.max(np.abs(want), where=unmasked(want), initial=0.0)) + float(np.max(np.abs(qk))))
    allowed = ROUNDING[dtype] * scale

    def off(factor):
        with np.errstate(invalid="ignore"):
            return float(np.nan_to_num(np.max(np.abs(got - want - factor * qk), where=keep, initial=0.0),
                                       nan=np.inf))

    if off(0.0) <= allowed or off(d ** -0.5) <= allowed:
        return
    if off(1.0) <= allowed:
        raise ScoresMisused(
            f"forward(q, k) given non-zero queries and keys of head dimension {d} returned q·kᵀ + bias: "
            f"the logits are q·kᵀ/√d + bias [attn.logits, attn.placement], so its scores are √{d} too "
            "large (with the zero tensors of dimension 1 the graded call hands it, this cannot show); "
            "scale them, or return the bias alone for the caller to add")
    raise ScoresMisused(
        f"forward(q, k) given non-zero queries and keys of head dimension {d} returned neither the bias "
        f"alone nor q·kᵀ/√d + bias (off the nearer by up to {min(off(0.0), off(d ** -0.5)):.3g}, "
        f"allowed {allowed:.3g}) [attn.logits]: its output depends on the queries' and keys' values "
        "in another way")


class ScoresMisused(fire_kit.Mistake, ValueError):
    """A module given attention scores that does not return them added to its bias."""


def check_scores(bias, probed, scores, dtype, named, to_numpy=np.asarray):
    """Checks a ``scores`` call: ``bias`` [H, T, T] is the module's output for zero scores,
    ``probed`` its raw output for the non-zero ``scores`` [B, H, T, T] (arrays or tensors that
    ``to_numpy`` turns into float64 NumPy arrays, one [T, T] slice at a time). A module that
    returns ``scores + bias`` passes; so does one whose output does not depend on the scores'
    values (it reads only their length), unless its parameter's name says it is given scores
    (``named``): in a model, its attention logits would be replaced by the bias. Anything else
    changes the scores in another way than adding the bias, and is refused saying by how much.
    Entries the bias masks (non-finite, or ≤ −1e3 under ``masked``) are left out."""
    B, H, T, _ = scores.shape
    shape = tuple(probed.shape)
    if len(shape) == 3 and shape[0] == B * H and B > 1:
        probed = probed.reshape(B, H, T, T)
    elif shape == (H, T, T):
        probed = probed[None]
    elif shape not in ((1, H, T, T), (B, H, T, T)):
        raise ScoresMisused(f"called with non-zero scores {[B, H, T, T]}, the module returned shape "
                            f"{list(shape)}, though with zero scores it returned a bias of [{H}, {T}, {T}]: "
                            "its output's shape depends on the scores' values")
    added = ignored = 0.0
    scale = 1.0
    # Σ d·s and Σ s² of d = output − bias against the scores, for the one factor k with which
    # the output would be k·scores + bias (a module that scales the scores it is given).
    ds = ss = 0.0
    pairs = []
    for b in range(B):
        for h in range(H):
            got = to_numpy(probed[min(b, probed.shape[0] - 1)][h]).astype(np.float64)
            s = to_numpy(scores[b][h]).astype(np.float64)
            want = to_numpy(bias[h]).astype(np.float64)
            keep = unmasked(want)
            with np.errstate(invalid="ignore"):
                scale = max(scale, np.max(np.abs(s) + np.abs(want), where=keep, initial=0.0))
                # A NaN or infinity where the bias is finite is as far off as can be.
                added = max(added, np.nan_to_num(np.max(np.abs(got - s - want), where=keep, initial=0.0),
                                                 nan=np.inf))
                ignored = max(ignored, np.nan_to_num(np.max(np.abs(got - want), where=keep, initial=0.0),
                                                     nan=np.inf))
                d = got - want
                ds += float(np.sum(d * s, where=keep & np.isfinite(d)))
                ss += float(np.sum(s * s, where=keep & np.isfinite(d)))
                pairs.append((d, s, keep))
    allowed = ROUNDING[dtype] * scale
    if added <= allowed or (ignored <= allowed and not named):
        return
    k = ds / ss if ss > 0 else 0.0
    with np.errstate(invalid="ignore"):
        scaled = max((np.nan_to_num(np.max(np.abs(d - k * s), where=keep, initial=0.0), nan=np.inf)
                      for d, s, keep in pairs), default=np.inf)
    if ignored > allowed and scaled <= allowed:
        raise ScoresMisused(
            f"forward was given non-zero attention scores and returned them scaled by {k:.6g} plus the bias "
            f"(k·scores + bias, to within {scaled:.3g}): a module given scores must return them unchanged "
            "with the bias added, scores + bias; any scaling of the logits (1/√d) is the caller's "
            "[fire.bias]")
    if ignored <= allowed:
        raise ScoresMisused(
            "forward was given non-zero attention scores (its parameter's name says it adds the bias "
            "to them) and returned the bias without them: in a model the attention logits would be "
            "replaced by the bias; return scores + bias [fire.bias] (a module that reads only the "
            "scores' shape and returns the bias for its caller to add is graded so with --call "
            "scores_shape)")
    raise ScoresMisused(
        f"forward was given non-zero attention scores and returned neither scores + bias nor a bias "
        f"that ignores them: its output minus the scores differs from its output at zero scores by "
        f"up to {added:.3g} (allowed {allowed:.3g}); a module given scores must return scores + bias "
        "[fire.bias]")
