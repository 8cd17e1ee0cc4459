"""What training does to a module that a single call does not.

A model calls its FIRE module once per step, and between steps an optimiser changes the
parameters in place (``p.add_(…)`` under ``no_grad``). A module that keeps what it computed in
one call (a bias cached under the length, a normaliser or ψ table computed once) must follow
those changes, and one that keeps a tensor with its autograd graph must not backpropagate
through it twice. One call of a freshly loaded module shows neither, and loading by
``load_state_dict`` clears exactly the caches that are cleared only there. So before the
graded call the ready-made torch glue runs one training step on the module holding the case's
values (``step``): the parameters changed in place as an optimiser's step changes them, a
forward and backward in train mode, the case's values written back in place, the gradients
cleared. A module that kept anything from that step answers the graded call with it.

Then ``twin``: a second module built anew (with another ``init_c`` where the glue passes the
case's: a module whose bias follows its constructor's ``init_c`` rather than the ``c`` it holds,
a ψ table built in ``__init__``, shows it) and loaded with the same values must return the
same bias; where it does not, the independent NumPy FIRE says which of the two is the case's.
"""

import numpy as np

from fire_conformance import kit as fire_kit
from fire_conformance.calls import ROUNDING
from fire_conformance.repeats import StaleBias

try:
    import torch
except ImportError:  # only torch modules take steps
    torch = None

# The optimiser's change: every trainable floating parameter scaled by this (exact to restore:
# the case's values are written back from a copy).
SCALE = 1.25

# The largest square (rows × columns) the twin is compared on and the step's backward runs on:
# the mistakes they find show at every length, and a second module, or a backward through an
# MLP over every pair, doubles the glue's time and memory there (Appendix E's hidden layer over a
# 4 096-square is 2 GiB in float32).
TWIN_LIMIT = 1 << 20


class SecondBackward(fire_kit.Mistake):
    """A backward after the training step's fails on what the module kept from it."""


class FollowsInitC(fire_kit.Mistake):
    """The bias follows the constructor's init_c, not the c the module holds."""


class TwinDiffers(fire_kit.Mistake):
    """Two modules holding the same values return different biases."""


def step(m, call, backward=True):
    """Runs one training step on ``m`` as the module holding the case's values: its trainable
    floating parameters scaled in place by ``SCALE``, ``call()`` (the glue's forward, returning
    the bias) in train mode with gradients and, with ``backward``, a backward through its sum,
    the parameters written back in place and their gradients cleared. Returns the step's bias
    (detached), or ``None`` where no parameter changed (all zero) or the step failed (the
    graded call, run next, says why)."""
    params = [p for p in m.parameters() if p.requires_grad and p.is_floating_point()]
    kept = [p.detach().clone() for p in params]
    changed = any(bool((p != 0).any()) for p in kept)
    m.train()
    try:
        with torch.no_grad():
            for p in params:
                p.mul_(SCALE)
        with torch.enable_grad():
            out = call()
            if backward and isinstance(out, torch.Tensor) and out.requires_grad:
                out.float().sum().backward()
    except Exception:
        out = None
    finally:
        with torch.no_grad():
            for p, k in zip(params, kept):
                p.copy_(k)
        for p in m.parameters():
            p.grad = None
    if not changed or not isinstance(out, torch.Tensor):
        return None
    return out.detach().clone()


def second_backward(e):
    """The glue's finding for a graded backward failing after ``step``'s: the module keeps a
    tensor of an earlier call's graph, or one the in-place update changed under it. ``None``
    for any other error."""
    text = str(e)
    if "backward through the graph a second time" in text:
        kept = "a tensor with the autograd graph of an earlier call (a table computed from a parameter in __init__, or cached across calls)"
    elif "modified by an inplace operation" in text:
        kept = "a tensor computed in an earlier call, which the optimiser's in-place update of a parameter then changed (a cached normaliser or ψ table)"
    else:
        return None
    return SecondBackward(
        f"the second backward through the module fails ({type(e).__name__}: "
        f"{text.splitlines()[0][:160]}): it keeps {kept}, so training stops at its second step; "
        "compute it in forward on every call, or detach and recompute what you keep [grad.vjp]")


def twin_differs(got, twin, dtype):
    """Whether two biases of the same values differ beyond rounding."""
    got, twin = np.asarray(got, dtype=np.float64), np.asarray(twin, dtype=np.float64)
    if got.shape != twin.shape:
        return True
    finite = np.isfinite(got)
    if not np.array_equal(finite, np.isfinite(twin)):
        return True
    scale = max(1.0, float(np.max(np.abs(got[finite]), initial=0.0)))
    return bool(np.any(np.abs(got[finite] - twin[finite]) > ROUNDING[dtype] * scale))


def distance(a, b, queries, keys):
    """The largest difference between two biases on their causal entries (key at or before its
    query: where every convention for later keys agrees [conv.future]), ∞ where their shapes or
    patterns of non-finite values differ there."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return np.inf
    causal = np.broadcast_to(np.asarray(keys)[None, :] <= np.asarray(queries)[:, None], a.shape)
    a, b = a[causal], b[causal]
    finite = np.isfinite(b)
    if not np.array_equal(np.isfinite(a), finite):
        return np.inf
    return float(np.max(np.abs(a[finite] - b[finite]), initial=0.0))


# How much nearer the case's bias one of two differing biases must be to be called the case's.
NEARER = 10.0


def twin_mistake(got, twin, reference, queries, keys, other_c):
    """The glue's finding where the graded bias ``got`` and the twin's differ: which of them is
    the case's (``reference``, the NumPy FIRE: ``NEARER`` times nearer it than the other), and
    so which mistake. ``other_c``: the ``init_c`` the twin was built with (``None``: built as
    the module was)."""
    d_got, d_twin = distance(got, reference, queries, keys), distance(twin, reference, queries, keys)
    if d_twin * NEARER < d_got:
        return StaleBias(
            "after one training step (its parameters changed in place, a forward and backward, "
            "the case's values written back in place) the module returns a bias a newly built "
            "module holding the same values does not, and not the case's: it keeps part of what "
            "it computed before its parameters changed (a cached bias, normaliser or ψ table "
            "cleared only by load_state_dict, or never), so in training every step after the "
            "first uses stale values; recompute it, or key a cache on the parameters' versions "
            "[fire.bias]")
    if d_got * NEARER < d_twin and other_c is not None:
        return FollowsInitC(
            f"built with init_c = {other_c:.6g} and given the case's values (its c included), the "
            "module returns another bias than when built with the case's c: its bias follows the "
            "constructor's init_c, not the c it holds (a table of ψ computed in __init__), so "
            "neither a loaded checkpoint's c nor a trained one reaches it; compute ψ from the "
            "parameter c in forward [fire.psi], [fire.params]")
    return TwinDiffers(
        "two modules holding the same values return different biases (one built anew"
        + (f" with init_c = {other_c:.6g}" if other_c is not None else "")
        + ", the other after one training step): its bias depends on more than the values it "
        "holds and the positions (a constructor argument, an earlier call) [fire.bias]")
