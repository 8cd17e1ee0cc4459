"""What training does to a module that a single call does not.

A model calls its FIRE module once per step, and between steps an optimiser changes the
parameters in place (``p.add_(…)`` under ``no_grad``). A module that keeps what it computed in
one call (a bias cached under the length, a normaliser or ψ table computed once) must follow
those changes, and one that keeps a tensor with its autograd graph must not backpropagate
through it twice. One call of a freshly loaded module shows neither, and loading by
``load_state_dict`` clears exactly the caches that are cleared only there. So before the
graded call the ready-made torch glue runs what training does to the module holding the case's
values (``step``): the parameters changed in place as an optimiser's step changes them, an
evaluation (eval mode, no gradients), two forwards and backwards in train mode (gradient
accumulation), the case's parameter values written back in place, the gradients cleared. A
module that kept anything from that step answers the graded call with it. (Buffers a train-mode
forward updates, running statistics, are not restored: no part of FIRE has any.) The JAX glue's
step (``jax_step``) is the part a functional call shows: the module called with its parameters
scaled, then given the case's values again; what it keeps between calls it keeps in an NNX
module's attributes (``nnx_bridge`` calls the one module built, as a program does) or the
program's globals.

Then ``twin``: a second module built anew (with another ``init_c`` where the glue passes the
case's: a module whose bias follows its constructor's ``init_c`` rather than the ``c`` it holds,
a ψ table built in ``__init__``, shows it) and loaded with the same values must return the
same bias; where it does not, the independent NumPy FIRE says which of the two is the case's.
"""

import contextlib

import numpy as np

from fire_conformance import kit as fire_kit
from fire_conformance import numpy_fire
from fire_conformance import repeats
from fire_conformance.calls import ROUNDING, unmasked
from fire_conformance.outputs import as_numpy
from fire_conformance.repeats import StaleBias, distance

try:
    import torch
except ImportError:  # only torch modules take steps
    torch = None

# The optimiser's change: every trainable floating parameter scaled by this (exact to restore:
# the case's values are written back from a copy).
SCALE = 1.25

# The largest square (rows × columns) the twin is compared on and the whole step runs on:
# the mistakes they find show at every length, and a second module, or a backward through an
# MLP over every pair, doubles the glue's time and memory there (Appendix E's hidden layer over a
# 4 096-square is 2 GiB in float32).
FULL_LIMIT = 1 << 20


class SecondBackward(fire_kit.Mistake):
    """A backward fails on what the module kept from an earlier call."""


class FollowsInitC(fire_kit.Mistake):
    """The bias follows the constructor's init_c, not the c the module holds."""


class TwinDiffers(fire_kit.Mistake):
    """Two modules holding the same values return different biases."""


# The parts of the parameters an optimiser may change alone (one frozen, or in a group whose
# learning rate is zero; a checkpoint that differs in one): the scalars (c, the multiplier), then
# the rest (f_θ), by their number of entries. A cache keyed on only one part (the length and c)
# misses every step that changes all of them, and answers stale when only the other changes.
PARTS = (lambda n: n <= 1, lambda n: n > 1)


def step(m, call, full=True):
    """Runs what training does between two graded calls on ``m``, the module holding the case's
    values: its trainable floating parameters scaled in place by ``SCALE`` (an optimiser's
    step), with ``full`` an evaluation (eval mode, no gradients: ``call()`` is the glue's
    forward, without its probes, returning the bias) and two forwards and backwards in train mode
    (gradient accumulation: a graph kept from the first fails the second), else one train-mode
    forward alone (a square too large for more), and with ``full`` two more steps, each scaling
    one of ``PARTS`` alone in train mode and evaluating after it; then the case's values written
    back in place and the gradients cleared. Returns ``(bias, error, changed)``: the train-mode bias
    (detached), or ``None`` where no parameter changed (all zero) or a call failed (the graded
    call, run next, says why); the glue's finding where the second backward failed on what the
    first kept (``second_backward``), else ``None``; and whether scaling changed a parameter."""
    params = [p for p in m.parameters() if p.requires_grad and p.is_floating_point()]
    kept = [p.detach().clone() for p in params]
    changed = any(bool((p != 0).any()) for p in kept)
    bias, error = None, None
    try:
        with torch.no_grad():
            for p in params:
                p.mul_(SCALE)
        if full:
            m.eval()
            with torch.no_grad():
                call()
        m.train()
        # The reduced step keeps no graph: no backward follows it.
        with torch.enable_grad() if full else torch.no_grad():
            out = call()
            # Cloned at once: a module may write its next output where this one is (a
            # preallocated workspace, CUDA graphs).
            bias = out.detach().clone() if isinstance(out, torch.Tensor) else None
            if full and bias is not None and out.requires_grad:
                out.float().sum().backward()
                try:
                    call().float().sum().backward()
                except RuntimeError as e:
                    error = second_backward(e)
        if full:
            # Each a training step changing one part (in train mode, as an optimiser's is)
            # and an evaluation after it.
            for part in PARTS:
                m.train()
                with torch.no_grad():
                    for p, k in zip(params, kept):
                        p.copy_(k * SCALE if part(p.numel()) else k)
                m.eval()
                with torch.no_grad():
                    call()
            m.train()
    except Exception:
        bias = None
    finally:
        with torch.no_grad():
            for p, k in zip(params, kept):
                p.copy_(k)
        for p in m.parameters():
            p.grad = None
    return (bias if changed else None), error, changed


class InferenceMode(fire_kit.Mistake):
    """Under ``torch.inference_mode()`` the module returns another bias than under
    ``torch.no_grad()``."""


def check_inference(m, call, full, dtype):
    """Raises where the torch module ``m`` (in eval mode, holding the case's values), called
    under ``torch.inference_mode()`` as generation and evaluation loops call it, returns another
    bias than ``full``, the graded call's under ``torch.no_grad()``: on a copy of it (tensors
    made there cannot enter autograd later, so the module graded goes on without them), after a
    step (its parameters scaled by ``SCALE`` in training mode and evaluated in that mode, then
    written back in training mode), so that a cache kept only there, and stale after an
    optimiser's step, shows.
    ``call(module)`` is the glue's forward returning the bias. Returns the case's note where it
    could not be checked, else None."""
    import copy

    try:
        twin = copy.deepcopy(m)
    except Exception as e:  # noqa: BLE001 - a module that cannot be copied is left unchecked
        return f"the module under torch.inference_mode() not checked: it cannot be copied ({type(e).__name__})"
    def inferred():
        twin.eval()
        with torch.inference_mode():
            return call(twin).clone()

    try:
        with scaled(twin) as changed:
            before = inferred()
        after = inferred()
    except Exception as e:  # noqa: BLE001 - said, not failed: the graded call ran
        return ("the module under torch.inference_mode() not checked: called so, it raised "
                f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300])
    if not twin_differs(as_numpy(after), as_numpy(full), dtype):
        return None
    if not changed or twin_differs(as_numpy(after), as_numpy(before), dtype):
        raise InferenceMode(
            "under torch.inference_mode() (as generation and evaluation loops call it) the module "
            "returns another bias than under torch.no_grad(), which the cases grade: a path it "
            "takes only there (torch.is_inference_mode_enabled()) computes something else [fire.bias]")
    raise StaleBias(
        "under torch.inference_mode() (as generation and evaluation loops call it) the module "
        "returns the bias it computed in that mode before its parameters changed (an optimiser's "
        "step, then the case's values written back): a cache it keeps only under inference mode "
        "goes stale once training steps; recompute it on every call, or key it on the parameters' "
        "versions as well [fire.bias]")


@contextlib.contextmanager
def scaled(m):
    """An optimiser's step on the torch module ``m`` and back: its trainable floating
    parameters scaled in place by ``SCALE`` in training mode (a module may clear a cache when put
    in training mode: that is right), the body run, then their values written back in place in
    training mode, the module left in evaluation mode. Yields whether scaling changed any (not
    all zero)."""
    params = [p for p in m.parameters() if p.requires_grad and p.is_floating_point()]
    kept = [p.detach().clone() for p in params]
    try:
        m.train()
        with torch.no_grad():
            for p in params:
                p.mul_(SCALE)
        yield any(bool((k != 0).any()) for k in kept)
    finally:
        m.train()
        with torch.no_grad():
            for p, k in zip(params, kept):
                p.copy_(k)
        m.eval()


def jax_scaled(params, jax, part=lambda n: True):
    """``params`` with every floating leaf ``part`` takes (by its size) scaled by ``SCALE``: an
    optimiser's step on a JAX module's parameters, as ``scaled`` takes one on a torch module."""
    floating = lambda a: jax.numpy.issubdtype(jax.numpy.asarray(a).dtype, jax.numpy.floating)  # noqa: E731
    return jax.tree_util.tree_map(
        lambda a: a * SCALE if floating(a) and part(jax.numpy.size(a)) else a, params)


def jax_step(call, params, jax):
    """What training does between two graded calls of a JAX module, as far as a functional
    call shows it: ``call(params)`` on the case's parameters with every floating leaf scaled by
    ``SCALE`` (an optimiser's step), then with each of ``PARTS`` scaled alone. The graded call
    then passes the case's values again: a module or program that kept what these calls
    computed (a bias cached in an ``nnx.data`` attribute, a ψ table in a module-level dict)
    answers with it, and ``twin_mistake`` or ``check_jax_kept`` names it. Returns the first
    call's bias as NumPy (empty where that call failed, which tells nothing: the graded call,
    run next, says why), or None where scaling changed no parameter (all zero)."""
    floating = lambda a: jax.numpy.issubdtype(jax.numpy.asarray(a).dtype, jax.numpy.floating)  # noqa: E731
    if not any(floating(a) and bool(jax.numpy.any(a != 0)) for a in jax.tree_util.tree_leaves(params)):
        return None
    first = None
    for part in (lambda n: True,) + PARTS:
        try:
            out = call(jax_scaled(params, jax, part))
            if first is None:
                first = np.array(out)
        except Exception:
            pass
    return first if first is not None else np.zeros(0)


def check_jax_kept(got, first):
    """Raises where a JAX module's graded bias ``got`` is exactly the one it returned in
    ``jax_step``'s first call (``first``), every parameter scaled: it did not follow its
    parameters back (a cache outside the module, which a twin built anew shares too). Not for a
    bias of one value or none finite (``repeats.digest``)."""
    got = np.asarray(got)
    if first is None or first.shape != got.shape or repeats.digest(got) is None \
            or not np.array_equal(first, got, equal_nan=True):
        return
    did, where, fix = JAX_STEP
    raise StaleBias(
        f"the module returned exactly the bias of the glue's training step ({did}): it keeps a "
        f"bias computed once and does not recompute it when its parameters change ({where}, a "
        f"cache keyed on the length alone); {fix} [fire.bias]")


def second_backward(e):
    """The glue's finding for a backward failing on what the module kept from an earlier call
    (the training step's, or the graded forward's before a probe): a tensor of a graph already
    freed, or one changed in place since it was saved. ``None`` for any other error."""
    text = str(e)
    if "backward through the graph a second time" in text:
        kept = ("a tensor with the autograd graph of an earlier call (a table computed from a "
                "parameter in __init__, or a bias or normaliser cached across calls), so a second "
                "backward — the next training step, or gradient accumulation over two batches — fails")
    elif "modified by an inplace operation" in text:
        kept = ("a tensor one call saved for its backward that something changes in place before "
                "the backward reads it (a buffer the forward writes in place, a cache updated, a "
                "parameter an optimiser steps), so a model calling it twice before one backward "
                "(FIRE-S, one module for every layer) or training past a step fails")
    else:
        return None
    return SecondBackward(
        f"a backward through the module fails ({type(e).__name__}: {text.splitlines()[0][:160]}): "
        f"it keeps {kept}; compute it in forward on every call, or detach and recompute what you "
        "keep [grad.vjp]")


def check_traced(direct, traced, case, dtype):
    """Raises where a JAX module called directly and under ``jax.vjp`` with the same values
    returns different biases (``direct``, ``traced``: the case's entries): it keeps something
    between calls that one of the two routes does not see (a cache keyed on the module's
    identity, which the traced call, merged anew, misses), or draws random numbers. Which of the
    two is the case's (the NumPy FIRE, ``NEARER`` times nearer) says which: the direct call
    stale (``StaleBias``), else two calls that disagree (``TwinDiffers``)."""
    if not twin_differs(direct, traced, dtype):
        return
    reference = numpy_fire.reference(case)
    if reference is None:
        return
    d_direct, d_traced = distances(direct, traced, reference, case.queries, case.keys)
    if d_traced * NEARER < d_direct:
        did, where, fix = JAX_STEP
        raise StaleBias(
            f"after the glue's training step ({did}) the module called directly returns a bias "
            "it does not return under jax.vjp with the same values, and not the case's: it keeps "
            f"part of what it computed before its parameters changed ({where}), so every step "
            f"after the first uses stale values; {fix} [fire.bias]")
    raise TwinDiffers(
        "called directly and under jax.vjp with the same values, the module returns different "
        "biases: it depends on more than the values it holds and the positions (state kept "
        "between calls, random numbers drawn in evaluation) [fire.bias]")


def check_repeated(first, again, dtype):
    """Raises where two calls of a module, one after the other with the same values and
    positions, return different biases (``first``, ``again``: the case's entries)."""
    if twin_differs(first, again, dtype):
        raise TwinDiffers(
            "called twice, one call after the other, with the same values and positions, the "
            "module returns different biases: it changes from call to call (a value it updates on "
            "every call and reads back — a counter, a position offset, a running average of c — "
            "or random numbers drawn in evaluation), so in training every step reads another bias "
            "than its parameters give; a module meant to advance over decoding steps needs a "
            "build(case) glue that resets it for each case [fire.bias]")


def twin_differs(got, twin, dtype, entrywise=False):
    """Whether two biases of the same values differ beyond rounding: in the entries a ``masked``
    module masks (non-finite, or ≤ −1e3: ``unmasked``), or beyond rounding of the largest value
    elsewhere — a mask of ``finfo.min`` is no scale for the bias (every bias would be the same
    to its rounding). ``entrywise``: beyond rounding of each entry's own size (at least 1), for
    whether a bias moved at all where a few huge entries (a row over ε alone) would make every
    other change look like rounding."""
    got, twin = np.asarray(got, dtype=np.float64), np.asarray(twin, dtype=np.float64)
    if got.shape != twin.shape:
        return True
    kept = unmasked(got)
    if not np.array_equal(kept, unmasked(twin)):
        return True
    scale = np.maximum(1.0, np.abs(got[kept])) if entrywise else \
        max(1.0, float(np.max(np.abs(got[kept]), initial=0.0)))
    return bool(np.any(np.abs(got[kept] - twin[kept]) > ROUNDING[dtype] * scale))


def threshold_shows(case, moved, got, dtype):
    """Whether FIRE's bias for ``case`` differs from its bias with L_init = ``moved`` on the
    causal entries (key ≤ query) of the module's ``got`` that are no mask (``unmasked``, and not
    NaN: a module without |c| returns NaN for any L_init): the premise of the probe of a
    constructor keeping a threshold of its own (``held.threshold_moved``). Keys after
    the query are left out, which a module declaring ``zero`` or ``masked`` sets whatever L is;
    query 0, whose only causal key is at distance 0 (ψ(0) = 0 whatever L), tells nothing."""
    try:
        ref = numpy_fire.Fire(case.encoding).bias(case.queries, case.keys)
        other = numpy_fire.Fire({**case.encoding, "l_init": moved}).bias(case.queries, case.keys)
    except (ValueError, KeyError, TypeError, FloatingPointError):
        return False
    got = np.asarray(got, dtype=np.float64)
    if got.shape != ref.shape:
        return False
    causal = np.asarray(case.keys)[None, :] <= np.asarray(case.queries)[:, None]
    kept = unmasked(got) & causal[None]
    scale = max(1.0, float(np.max(np.abs(ref[kept]), initial=0.0)))
    return bool(np.any(np.abs(ref[kept] - other[kept]) > ROUNDING[dtype] * scale))


def check_own_threshold(case, got, built_with, dtype, untaken, theirs):
    """Raises ``held.keeps_own_threshold`` where a module whose ``init_L`` nothing the
    glue loads holds, built again with an ``init_L`` that moves the threshold past every position
    (``built_with(l_init)``: its bias then, picked as ``got``, or None where it cannot be built),
    returns the case's bias ``got`` unchanged: its threshold is its own [fire.params]. Not where,
    built with a lower ``init_L``, its bias changes: it takes the argument, and its bias unmoved
    by a higher one is another mistake (a threshold taken as min(L, i), which a threshold past
    every position leaves as i), which its values name. ``untaken``: the arguments its
    constructor does not take; ``theirs``: how it is given ``init_L``, for the message."""
    from fire_conformance import held

    moved = held.threshold_moved(case, untaken)
    if moved is None or not threshold_shows(case, moved, got, dtype):
        return
    again = built_with(moved)
    if again is None or twin_differs(got, again, dtype):
        return
    # A threshold of 1/2, below every position but 0 (threshold_moved has m > 0), and below the
    # case's.
    lowered = min(float(case.encoding["l_init"]) / 4, 0.5 / float(case.encoding["l_multiplier"]))
    if threshold_shows(case, lowered, got, dtype):
        below = built_with(lowered)
        # Entry by entry: a module taking min(L, i) has huge values in query 0's row (ψ(0) over
        # ε), which would make the rest's change look like rounding at their scale.
        if below is not None and twin_differs(got, below, dtype, entrywise=True):
            return
    raise held.keeps_own_threshold(case, moved, theirs)


# How much nearer the case's bias one of two differing biases must be to be called the case's.
NEARER = 10.0


# What each glue's step did, as its finding says it, and where a module keeps what goes stale.
TORCH_STEP = ("its parameters changed in place, an evaluation, forwards and backwards, the case's "
              "values written back in place",
              "a cached bias, normaliser or ψ table cleared only by load_state_dict, or never",
              "recompute it, or key a cache on the parameters' versions")
JAX_STEP = ("the module called with its parameters changed as an optimiser's step changes them, "
            "then given the case's values again",
            "a bias, normaliser or ψ table kept in the module or the program between calls",
            "recompute it from the parameters on every call")


def distances(a, b, reference, queries, keys):
    """How far two biases ``a`` and ``b`` are from the case's (``reference``, the NumPy FIRE):
    on the causal entries, or on every entry where those do not tell them apart."""
    d_a, d_b = distance(a, reference, queries, keys), distance(b, reference, queries, keys)
    if d_a == d_b:
        # Every entry (each query placed past every key): where the causal ones are the same
        # for any c (a query 0 sees itself alone).
        last = [max(keys)] * len(queries)
        d_a, d_b = distance(a, reference, last, keys), distance(b, reference, last, keys)
    return d_a, d_b


def twin_mistake(got, twin, reference, queries, keys, other_c, stepped=TORCH_STEP):
    """The glue's finding where the graded bias ``got`` and the twin's differ: which of them is
    the case's (``reference``, the NumPy FIRE: ``NEARER`` times nearer it than the other, on the
    causal entries, or on every entry where those do not tell), and so which mistake.
    ``other_c``: the ``init_c`` the twin was built with (``None``: built as the module was);
    ``stepped``: the step the graded module took first (``TORCH_STEP``: ``step``'s;
    ``JAX_STEP``: ``jax_step``'s), ``None`` where it took none."""
    d_got, d_twin = distances(got, twin, reference, queries, keys)
    if stepped and d_twin * NEARER < d_got:
        did, where, fix = stepped
        return StaleBias(
            f"after the glue's training step ({did}) the module returns a bias a newly built "
            "module holding the same values does not, and not the case's: it keeps part of what "
            f"it computed before its parameters changed ({where}), so in training every step "
            f"after the first uses stale values; {fix} [fire.bias]")
    if d_got * NEARER < d_twin and other_c is not None:
        return FollowsInitC(
            f"built with init_c = {other_c:.6g} and given the case's values (its c included), the "
            "module returns another bias than when built with the case's c: its bias follows the "
            "constructor's init_c, not the c it holds (a table of ψ computed in __init__ or setup), "
            "so neither a loaded checkpoint's c nor a trained one reaches it; compute ψ from the "
            "parameter c in forward [fire.psi], [fire.params]")
    return TwinDiffers(
        "two modules holding the same values return different biases (one built anew"
        + (f" with init_c = {other_c:.6g}" if other_c is not None else "")
        + (", the other after the glue's training step" if stepped else ", the other with the case's c")
        + "): its bias depends on more than the values it holds and the positions (a constructor "
        "argument, an earlier call) [fire.bias]")
