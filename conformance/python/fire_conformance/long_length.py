"""Gradients and values at a long length, against this FIRE's.

The gradient cases are small squares (at most 12 positions), and no value case asks for more
than a few hundred pairs of positions: a glue handing its module the position lists never
calls it over more. A path a module takes only for long sequences, to save memory or time (a
``torch.no_grad()``, ``.detach()`` or ``stop_gradient`` past some length, a normaliser kept out
of the graph there, an input quantised or approximated there), changes what a model trained
or run at its own context computes while every graded value and gradient passes. So once per
run, on the first FIRE case whose own output is FIRE's, the module holding that case's values
is asked for a few rows against every key of a square of ``LENGTH`` positions (less where
``--max-len`` says its context is shorter): its bias there must be this FIRE's (``numpy_fire``)
on each row's keys up to the diagonal, and, on a gradient case, so must the gradients of
Σ G ⊙ b for a cotangent G on each row's keys before the diagonal, so that no convention of the
future keys or of a kink enters, in the case's check as in the probe. [grad.vjp]

The tolerances are loose (``VALUES`` and ``TOLERANCE`` of the largest, at least 1): what they
look for is a path that computes another bias or sends another gradient, or none, not the
rounding the cases grade.
"""
import copy
import time

import numpy as np

from fire_conformance import kit as fire_kit
from fire_conformance import numpy_fire, repeats, steps, train_mode
from fire_conformance.calls import ROUNDING
from fire_conformance.outputs import as_numpy
from fire_conformance.steps import twin_differs

# Past 2 048, the length a memory-saving path is most often cut at (`T > 1024`, `T >= 2048`),
# and half the longest graded square: Appendix E's hidden layer over it is 4·2 049² floats a
# hidden unit, a few hundred MiB with its gradient at the cases' width.
LENGTH = 2049
# The case's own gradients must be FIRE's to `AGREES` of the largest for the probe to run; the
# probe's, to `TOLERANCE`: a path that sends another gradient, or none, is off by its whole size,
# where precision a module chose (f_θ held in float16) drifts by a percent or two over a long
# square's sums.
AGREES = 1e-3
TOLERANCE = 5e-2
# The bias, on each row's keys up to the diagonal, to `VALUES` of the largest, the case's own
# as the probe's: ten times the f32 profile's [num.profiles], which a module computing in f32
# meets at any length (ψ's ratio lies in [0, 1]), where an input quantised to 1/256 past some
# length is off by 10⁻³.
VALUES = 1e-4
# `gradients(...)` carries the module's bias for the rows and keys asked under this name, beside
# the gradients of a gradient case: compared with FIRE's by `bias_off`; under `EVALUATED` its
# bias in evaluation mode where the gradients were taken in training mode; under `HOW` the
# call's mode, said in the messages; under `BEFORE` the evaluation mode's bias a training step
# before the call computed (its parameters scaled), which a stale cache answers with.
BIAS = "#bias"
EVALUATED = "#evaluated"
HOW = "#how"
BEFORE = "#before"
EXTRA = (BIAS, EVALUATED, HOW, BEFORE)
# Where the check has a time budget (a `build(case)` glue, whose speed nothing bounds), it is
# made over `FIRST` positions before `LENGTH`, and the call over `LENGTH` only where that one's
# time, scaled by the square's size, fits `SHARE` of the seconds a reply may take.
FIRST = 257
SHARE = 1 / 3
# A long length says something of its own only where the module is FIRE's at a short one: the
# probe's rows and keys over `SHORT` positions (past a cut at 32, under most thresholds of the
# cases it runs on) must be FIRE's first, so a mistake the module makes at any length (positions
# counted from the first query, a parameter detached) is left to the cases, which name it.
SHORT = 17
# And only on a case that tells: its queries lie on both sides of the threshold L (a mistake in
# max(i, L) shows on it), and on a gradient case each parameter's gradient is at least `STRONG`
# of the largest (a parameter detached, or a gradient negated, shows on it).
STRONG = 1e-2


class LongGradient(fire_kit.Mistake, ValueError):
    """A module whose gradients at a long length are not FIRE's."""


class LongBias(fire_kit.Mistake, ValueError):
    """A module whose bias at a long length is not FIRE's."""


def rows_of(length, threshold):
    """The rows the cotangent covers: two near the start, the middle and the last two, less a
    row at the threshold L itself (None: none) or within a float32 rounding of it (a tie of
    max(i, L), whose derivative is a convention [grad.kinks], not what this check looks for)."""
    return sorted(r for r in {1, 2, length // 2, length - 2, length - 1}
                  if 0 < r < length and (threshold is None
                                         or abs(r - threshold) > 1e-3 * max(1.0, threshold)))


def probe_case(case, length):
    """``case`` asked over ``rows_of(length)`` × every key below ``length``, with a seeded
    cotangent on each row's keys before it: the diagonal, where x = 0 sits on f_θ's kinks
    wherever a hidden bias is 0 (a convention again), and the future keys (their convention
    [conv.future]) have none."""
    probe = copy.copy(case)
    rows = rows_of(length, numpy_fire.Fire(case.encoding).L())
    probe.queries, probe.keys = rows, list(range(length))
    probe.inputs = {**case.inputs, "queries": rows, "keys": probe.keys}
    if "cotangent" not in case.inputs:
        return probe, None
    heads = np.shape(case.inputs["cotangent"].array())[0]
    g = np.random.default_rng(11).standard_normal((heads, len(rows), length))
    g *= np.arange(length)[None, None, :] < np.asarray(rows)[None, :, None]
    return probe, g


def length_for(max_len):
    """``LENGTH``, or the module's context where ``--max-len`` names a shorter one."""
    return LENGTH if max_len is None else min(LENGTH, max_len)


def differing(got, case, queries, keys, g, tolerance):
    """``(none, off)``: the parameters of ``got`` (ours → the module's gradient, None where it
    sent none) that get no gradient, and those whose gradient differs from this FIRE's for
    ``queries`` × ``keys`` and the cotangent ``g`` by more than ``tolerance`` of its largest
    (at least 1), said for the message; c and the multiplier first."""
    if g is None:
        return [], []
    want = numpy_fire.Fire(case.encoding).vjp(queries, keys, g)
    if case.encoding["threshold"] != "learnable":
        want.pop("L_multiplier", None)
    none, off = [], []
    for ours in sorted(want, key=lambda n: (n != "c", n != "L_multiplier", n)):
        if ours not in got:
            continue
        w = np.asarray(want[ours], dtype=np.float64)
        scale = max(1.0, float(np.max(np.abs(w), initial=0.0)))
        if got[ours] is None:
            none.append(f"`{ours}`")
            continue
        worst = float(np.max(np.abs(np.asarray(got[ours], dtype=np.float64).reshape(w.shape) - w),
                             initial=0.0))
        if not worst <= tolerance * scale:
            off.append(f"`{ours}` (off by up to {worst:.3g}, FIRE's largest {scale:.3g})")
    return none, off


def bias_off(got, case, queries, keys, tolerance):
    """Where ``got`` (``BIAS``, or None) differs from this FIRE's bias for ``queries`` × ``keys``
    by more than ``tolerance`` of its largest (at least 1) on each row's keys up to the diagonal
    (those after it take a declared convention [conv.future]): ``(off, largest, head, row,
    key)`` of the worst entry, said for the message; else None."""
    if got is None:
        return None
    want = numpy_fire.Fire(case.encoding).bias(queries, keys)
    causal = np.asarray(keys)[None, None, :] <= np.asarray(queries)[None, :, None]
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(causal, np.abs(np.asarray(got, dtype=np.float64).reshape(want.shape) - want), 0.0)
    diff = np.where(np.isnan(diff), np.inf, diff)
    scale = max(1.0, float(np.max(np.abs(np.where(causal, want, 0.0)), initial=0.0)))
    h, r, k = np.unravel_index(int(np.argmax(diff)), diff.shape)
    worst = float(diff[h, r, k])
    return None if worst <= tolerance * scale else (worst, scale, int(h), queries[r], keys[k])


def before_each(case):
    """The case's cotangent on the keys before each query alone, as the probe's: no convention
    of the future keys or of the diagonal's kinks enters; None for a bias case."""
    if "cotangent" not in case.inputs:
        return None
    cot = case.inputs["cotangent"].array()
    return cot * (np.asarray(case.keys)[None, None, :] < np.asarray(case.queries)[None, :, None])


def tells(case, g):
    """Whether ``case`` (with the cotangent ``g`` on a gradient case) is one a mistake the module
    makes at any length would show on (``SHORT``, ``STRONG``): queries on both sides of the
    threshold (where there is one), and every gradient of FIRE's there far from 0."""
    fire = numpy_fire.Fire(case.encoding)
    threshold = fire.L()
    if threshold is not None and not min(case.queries) < threshold < max(case.queries) - 1:
        return False
    if g is None:
        return True
    want = fire.vjp(case.queries, case.keys, g)
    if case.encoding["threshold"] != "learnable":
        want.pop("L_multiplier", None)
    sizes = {name: float(np.max(np.abs(w), initial=0.0)) for name, w in want.items()}
    return min(sizes.values()) >= STRONG * max(1.0, max(sizes.values()))


def probed(gradients, case, length, timeout=None):
    """Runs the check: ``gradients(case, g)`` is the module's (ours → gradient, None where it
    sends none) for a case and a cotangent, and a function saying whether a second call returns
    the same output (called only where the answer matters: a second call over the long square
    costs a third of the check). Where the case's own, for ``before_each``, are not this FIRE's
    (to ``AGREES``) the case fails on its own, and a long length would only say it again:
    returns False, unchecked. With ``timeout`` (the seconds the harness allows a reply) the
    check is made over ``FIRST`` positions first, and over ``length`` only where that fits
    (``affordable``). A call the module refuses, a bias that changes from call to call or
    gradients that are not finite are noted (``not_checked``). Returns True once checked."""
    g = before_each(case)
    if not tells(case, g):
        return False
    try:
        small, steady = gradients(case, g)
        if not steady() or differing(small, case, case.queries, case.keys, g, AGREES) != ([], []) \
                or bias_off(small.get(BIAS), case, case.queries, case.keys, VALUES) is not None:
            return False
    except fire_kit.Mistake:
        raise
    except Exception:  # the graded call ran; this one tells nothing new
        return False
    if length > SHORT and not at_length(gradients, case, SHORT, judged=False):
        return True  # wrong at a short length too: the cases' to name
    if timeout is None or length <= FIRST:
        at_length(gradients, case, length)
        return True
    seconds = at_length(gradients, case, FIRST)
    if seconds is not None and affordable(gradients, case, length, seconds, timeout * SHARE):
        at_length(gradients, case, length)
    return True


def at_length(gradients, case, length, judged=True):
    """The check over ``length`` positions: raises ``LongBias`` or ``LongGradient`` where the
    bias or the gradients are not FIRE's; notes the case and returns None where they could not
    be checked; else returns the seconds the call took. Not ``judged`` (the short control):
    returns whether they are FIRE's, raising and noting nothing."""
    probe, g = probe_case(case, length)
    try:
        started = time.perf_counter()
        got, steady = gradients(probe, g)
        seconds = time.perf_counter() - started
        finite = all(v is None or np.all(np.isfinite(v)) for n, v in got.items() if n not in EXTRA)
        # The bias judged: the call's own, else (where the gradients were taken in training
        # mode) evaluation's; and the mode said with it.
        how, shown = got.get(HOW), got.get(BIAS)
        values = bias_off(shown, case, probe.queries, probe.keys, VALUES)
        if values is None and got.get(EVALUATED) is not None:
            values = bias_off(got[EVALUATED], case, probe.queries, probe.keys, VALUES)
            if values is not None:
                how = "in evaluation mode (no gradients, as inference calls it)"
                shown = got[EVALUATED]
        wrong = not finite or values is not None or \
            differing(got, case, probe.queries, probe.keys, g, TOLERANCE) != ([], [])
        if not judged:
            return not wrong
        if wrong and not steady():
            # State kept from call to call (an offset it advances) is the glue's other checks'
            # to name, not a path of length.
            case.note(not_checked(case, length, "what it returns there changes from one call to the next"))
            return None
    except fire_kit.Mistake:
        if not judged:
            return False
        raise
    except Exception as e:  # a call the module refuses at that length tells nothing here
        if not judged:
            return False
        case.note(not_checked(case, length, train_mode.called_so(e)))
        return None
    if values is not None:
        off, largest, h, i, j = values
        mode = f" {how}" if how else ""
        if got.get(BEFORE) is not None and shown is not None and \
                not twin_differs(np.asarray(shown), np.asarray(got[BEFORE]), "f32"):
            raise repeats.StaleBias(
                f"at a long length ({length} positions){mode} the module returns the bias it "
                f"computed there before its parameters changed (a training step: off by {off:.3g}, "
                f"FIRE's largest {largest:.3g}): a cache it keeps for long sequences, or keeps "
                "under another key than its parameters, goes stale once an optimiser steps, where "
                "the steps the small cases take show nothing [fire.bias]")
        raise LongBias(
            f"at a long length ({length} positions; the value cases ask for a few hundred pairs)"
            f"{mode} the bias is not FIRE's: off by {off:.3g} (FIRE's largest {largest:.3g}) at head "
            f"{h}, query {i}, key {j}: a path the module takes only for long sequences (an input "
            "quantised, approximated or chunked past some length) changes what it computes at "
            "that context, where the bias of the case itself is FIRE's [fire.bias]")
    if not finite:
        # A NaN in the square (ψ of a negative distance at keys after their query: 0 · NaN is
        # NaN) is the gradient cases' to fail and the report's to name, not a path of length.
        case.note(not_checked(case, length, "they are not finite there (a NaN anywhere in the "
                                            "square, keys after their query included, reaches "
                                            "every gradient: 0 · NaN is NaN)"))
        return None
    check(got, case, probe, g, length, how)
    return seconds


def affordable(gradients, case, length, seconds, budget):
    """Whether a call over ``length`` positions fits ``budget`` seconds, judged by one over
    ``FIRST`` that took ``seconds``, scaled by the square's size (a glue computing its rows
    alone takes less); timed again where it does not (a first call at new shapes may compile).
    Notes the case where it does not."""
    scale = (length / FIRST) ** 2
    if seconds * scale > budget:
        probe, g = probe_case(case, FIRST)
        try:
            started = time.perf_counter()
            gradients(probe, g)
            seconds = min(seconds, time.perf_counter() - started)
        except Exception:  # noqa: BLE001 - it answered once; the first time stands
            pass
    if seconds * scale <= budget:
        return True
    case.note(not_checked(case, length, f"a call there would take about {seconds * scale:.0f} s "
                                        f"at the speed of one over {FIRST} positions "
                                        f"({seconds:.2g} s, checked), past a third of the "
                                        f"{budget / SHARE:.0f} s the harness allows a reply "
                                        "(--timeout)"))
    return False


def check(got, case, probe, g, length, how=None):
    """Raises ``LongGradient`` where ``got`` differs from this FIRE's for ``probe`` and ``g``
    (``differing``), naming each such parameter; ``how``, the call's mode, is said."""
    none, off = differing(got, case, probe.queries, probe.keys, g, TOLERANCE)
    if none or off:
        said = "; ".join(part for part in (
            f"no gradient reaches {', '.join(none)}" if none else "",
            f"the gradient of {', '.join(off)} is not FIRE's" if off else "") if part)
        raise LongGradient(
            f"at a long length ({length} positions; the gradient cases are small squares)"
            f"{f' {how}' if how else ''} {said}: "
            "a path the module takes only for long sequences (a torch.no_grad(), .detach() or "
            "stop_gradient past some length, a normaliser kept out of the graph there) changes "
            "what training at that context learns, where the gradients of the case itself are "
            "FIRE's [grad.vjp]")


def not_checked(case, length, why):
    """The case's note where its bias or gradients at ``length`` could not be checked, and
    ``why``."""
    what = "gradients" if "cotangent" in case.inputs else "the bias"
    return f"{what} at a long length not checked ({length} positions): {why}"


def check_torch(glue, m, heads, case, names, train=False):
    """``probed`` for the torch module ``m`` (holding ``case``'s values, ``names``: ours by the
    module's) called through ``glue``'s forward; its gradients are cleared before and after
    each call. With ``train`` (its training mode is deterministic and agreed with evaluation on
    the case: ``train_mode.check_torch``) the gradients and the bias are taken in training mode
    (``module.train()``, dropouts off), as a training loop calls it, and the bias in evaluation
    mode (no gradients) too, as inference calls it: a path either takes alone past some length
    shows. Before a call at a long length the module takes a training step there (``stepped``),
    as ``steps.step`` takes one before every small case."""
    import contextlib

    import torch

    def forward(at):
        return glue.forward(m, heads, at, True, probes=False)

    def evaluated(at):
        m.eval()
        with torch.no_grad():
            out, plan = forward(at)
        return plan.pick(as_numpy(out))

    def mode():
        return train_mode.torch_dropouts_off() if train else contextlib.nullcontext()

    def stepped(at):
        # A training step at this length (`steps.scaled`) with an evaluation and a training
        # forward inside it: the evaluation's bias, which a cache that missed the step answers
        # with next; None where a call failed.
        try:
            with steps.scaled(m):
                before = evaluated(at)
                m.train()
                with torch.no_grad(), mode():
                    forward(at)
            return before
        except Exception:  # noqa: BLE001 - the graded call below says why, if anything
            return None

    def steady(at, first):
        m.train(train)
        try:
            with torch.no_grad(), mode():
                again, _ = forward(at)
        finally:
            m.eval()
        return not twin_differs(as_numpy(again), first, glue.dtype)

    def gradients(at, g):
        before = stepped(at) if len(at.keys) > SHORT else None
        for p in m.parameters():
            p.grad = None
        try:
            eval_bias = evaluated(at) if train else None
            m.train(train)
            with mode():
                full, plan = forward(at)
                if isinstance(full, torch.Tensor) and full.requires_grad:
                    cot = torch.as_tensor(plan.cotangent(g), dtype=full.dtype, device=full.device)
                    # The masked entries a module returns as −∞ get no cotangent (0 · ∞ is no number).
                    torch.where(cot != 0, full * cot, torch.zeros_like(full)).sum().backward()
            transposed = getattr(names, "transposed", ())
            got = {names[n]: (None if p.grad is None else p.grad.detach().cpu().numpy().T
                              if n in transposed else p.grad.detach().cpu().numpy())
                   for n, p in m.named_parameters() if p.requires_grad and n in names}
            first = as_numpy(full)
            del full
            got[BIAS] = plan.pick(first)
            got[EVALUATED], got[BEFORE] = eval_bias, before
            got[HOW] = "in training mode (module.train(), as a training loop calls it)" if train else None
            return got, lambda: steady(at, first)
        finally:
            m.eval()
            for p in m.parameters():
                p.grad = None

    return probed(gradients, case, length_for(glue.max_len))


def check_jax(glue, m, variables, params, plan, heads, case, loaded, in_out, jax, training=None):
    """``probed`` for the JAX module ``m`` (``variables`` with ``params`` holding ``case``'s
    values; ``loaded``: ours by the path of each leaf, ``in_out`` those kept ``[in, out]``)
    called as ``plan`` calls it. With ``training`` (``(call, how)``: its training call, which
    agreed with evaluation on the case; ``jax_glue.JaxGlue.training_call``) the gradients and the
    bias are taken in training mode, its keys fixed, and the bias in evaluation mode too. Before
    a call at a long length the module takes a training step there (``stepped``), as
    ``check_torch``'s does: a module keeping state between calls (an ``nnx.Cache``) keeps it."""
    from fire_conformance import calls, jax_calls, outputs, trees

    def gradients(at_case, g):
        at = calls.plan(plan.style, at_case, glue.max_len, glue.query_rows)
        args = glue.args(at, heads)
        rows, cols = at.shape

        def evaluated(p):
            out = jax_calls.apply(m, {**variables, "params": p}, *args)
            return outputs.squeeze(out, heads, rows, cols, batch=at.batch, check=False)

        def bias(p):
            if training is None:
                return evaluated(p)
            out = training[0](p, args, fixed=True)
            return outputs.squeeze(out, heads, rows, cols, batch=at.batch, check=False)

        def stepped():
            # An optimiser's step at this length (`steps.jax_scaled`): an evaluation call and,
            # where it has one, a training call on the parameters scaled; the evaluation's
            # bias, which a cache that missed the step answers with next; None where a call
            # failed (the graded calls below say why, if anything).
            try:
                scaled = steps.jax_scaled(params, jax)
                before = at.pick(as_numpy(evaluated(scaled)))
                if training is not None:
                    training[0](scaled, args, fixed=True)
                return before
            except Exception:  # noqa: BLE001
                return None

        before = stepped() if len(at_case.keys) > SHORT else None
        # Evaluation's bias from a direct call too, after a step: a cache the direct call hits
        # and the traced one misses (kept by instance outside the module) answers only there.
        eval_bias = at.pick(as_numpy(evaluated(params))) if training is not None or before is not None \
            else None
        full, pullback = jax.vjp(bias, params)
        (grads,) = pullback(jax.numpy.asarray(at.cotangent(g), dtype=full.dtype))
        flat = trees.flatten(grads)
        first = as_numpy(full)
        got = {name: (None if path not in flat else
                      np.asarray(flat[path]).T if path in in_out else np.asarray(flat[path]))
               for path, name in loaded.items()}
        got[BIAS] = at.pick(first)
        got[EVALUATED], got[BEFORE] = eval_bias, before
        if training is not None:
            got[HOW] = f"in training mode ({training[1]}, as a training loop calls it, its keys fixed)"
        return got, lambda: not twin_differs(as_numpy(bias(params)), first, glue.dtype)

    return probed(gradients, case, length_for(glue.max_len))


def check_kit(build, case, max_len, timeout=None):
    """``probed`` for a ``build(case)`` glue (``kit.serve``), on a bias or a gradient case: what
    it returns for a copy of the case asking ``rows_of`` × every key below the length, as any
    case asks its rows and keys (and, on a gradient case, carrying the probe's cotangent). The
    copies' ids say what they are (a glue memoising by id answers them afresh); notes ``build``
    makes on them are not the case's. Nothing bounds a glue's speed, so the check is budgeted
    by ``timeout``, the seconds the harness allows a reply (30 where it does not say)."""

    def gradients(at, g):
        asked = copy.copy(at)
        asked.id = f"{case.id}#long-length" if at is not case else f"{case.id}#again"
        asked.notes = []
        if g is not None:
            asked.inputs = {**at.inputs, "cotangent": fire_kit.Tensor(
                {"shape": list(np.shape(g)), "data": np.asarray(g, dtype=np.float64).reshape(-1).tolist()})}

        def call():
            out = build(asked)
            if not isinstance(out, dict):
                out = {asked.outputs[0]: out} if len(asked.outputs) == 1 else {}
            return {BIAS if name == "bias" else name: as_numpy(v) for name, v in out.items()}

        got = call()
        return got, lambda: not any(
            twin_differs(v, got[name], case.dtype if case.dtype in ROUNDING else "f64")
            for name, v in call().items() if name in got)

    return probed(gradients, case, length_for(max_len), 30.0 if timeout is None else timeout)
