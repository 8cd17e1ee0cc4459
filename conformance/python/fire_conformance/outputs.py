"""How a module's output is read as a bias ``[H, rows, cols]``: the shapes accepted, a batch
that must repeat one bias, heads returned last, and the errors that name the layouts of the
argument tried. Shared by the ready-made glues (``appendix_e``, ``jax_glue``)."""

import numpy as np

from fire_conformance import calls
from fire_conformance import kit as fire_kit

try:
    import torch
except ImportError:  # NumPy and JAX glues
    torch = None


# What each layout of x is, for the error that names them all.
X_SHAPES = {"x": "[B, H, T, 1]", "hidden": "[B, T, 1]", "scores": "[B, H, T, T]", "ids": "[B, T] token ids",
           "mask": "[B, T] attention mask of ones",
           "scores_shape": "[B, H, T, T] scores read for their shape", "sequence": "[T, 1] one sequence",
            "positions": "[n] positions", "position_ids": "[1, n] position_ids"}


def every_layout_failed(errors):
    """The error for a ``forward(x)`` (or ``forward(positions)``) that failed with every layout of
    its argument: each attempt's error (once, where all are the same), the first's type (a
    ``ValueError`` where that type cannot take a message). An error about the call's arguments
    is the signature, not the layout."""
    first = errors[0][1]
    arg = "positions" if errors[0][0] in calls.POSITION_LAYOUTS else "x"
    said = [f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}" for _, e in errors]
    if len(set(said)) == 1:
        tried = f"the same with {arg} as each of {', '.join(X_SHAPES[s] for s, _ in errors)}: {said[0]}"
    else:
        tried = "; ".join(f"{arg} as {X_SHAPES[s]}: {w}" for (s, _), w in zip(errors, said))
    signature = isinstance(first, TypeError) and any(
        w in str(first) for w in ("positional argument", "unexpected keyword"))
    how = (f"forward takes none of the calls the glue knows (--call {'|'.join(calls.CALLS)}): write a "
           "build(case) glue" if signature else "force one with --call, or write a build(case) glue")
    return retold(first, f"forward({arg}) failed with every layout of {arg} ({tried}); {how}")


def retold(e, text):
    """``e`` told as ``text``: an exception of its type where that type takes a message (a
    ``ValueError`` otherwise), caused by ``e``."""
    try:
        err = type(e)(text)
    except Exception:  # an exception type with a constructor of its own
        err = ValueError(text)
    err.__cause__ = e
    return err


def remembered_layout_failed(layout, e, T):
    """The error for a ``forward(x)`` that fails with the layout of x earlier cases took: the
    module's own failure at this length (a table of 512 positions at T = 601), said alone rather
    than after trying the layouts it never took."""
    return retold(e, f"forward(x) with x as {X_SHAPES[layout]}, the layout of x earlier cases took, "
                     f"failed at T = {T}: {type(e).__name__}: {(str(e).splitlines() or [''])[0]}")


class NotABias(TypeError):
    """The module returned something other than one array (a tuple, a dict): no layout of x
    changes that, so it is said at once, not after trying each."""


class HeadsLast(fire_kit.Mistake, ValueError):
    """The module returned its bias with the heads on the last axis ([1, T, T, H]), where every
    layout of x gives the same: the permute to [1, H, T, T] is missing."""


class BatchMixed(fire_kit.Mistake, ValueError):
    """The module's [B, H, T, T] differs between the sequences of the batch: the layout was taken
    (the shape is right), so no other layout is tried."""


def squeeze(out, heads, rows, cols, batch=1, check=True):
    """[H, R, C] from [H, R, C], [1, H, R, C] or [B, H, R, C] with equal batch entries (NaN where
    NaN: a declared ``negated`` convention may put it above the diagonal), or, for an input of
    ``batch`` > 1 sequences, ``[batch·H, R, C]`` batch-major (``nn.MultiheadAttention``'s
    ``attn_mask``). ``check=False`` skips the comparison of the entries (under JAX's tracing,
    where the caller checks the concrete output)."""
    if not hasattr(out, "shape"):
        what = type(out).__name__
        if isinstance(out, (tuple, list)):
            what = f"a {what} of {len(out)}"
        elif isinstance(out, dict):
            what = f"a dict with keys {list(out)}"
        else:
            what = f"a {what}"
        raise NotABias(f"forward returned {what}; the glue expects one tensor, the bias (or scores + bias, "
                       "for a module given scores), alone: write a "
                       "build(case) glue that picks it out (--fire-glue, fire-conformance-glue)")
    shape = tuple(out.shape)
    if len(shape) == 3 and shape == (heads, rows, cols):
        return out
    returned = list(shape)
    if batch > 1 and len(shape) == 3 and shape == (batch * heads, rows, cols):
        out = out.reshape(batch, heads, rows, cols)
        shape = tuple(out.shape)
    if len(shape) == 4 and shape[1:] == (heads, rows, cols):
        first = out[0]
        for b in range(1, shape[0] if check else 1):
            other = out[b]
            same = (other == first) | ((other != other) & (first != first))
            if not bool(same.all()):
                read = "" if returned == list(shape) else f" (read batch-major as {list(shape)})"
                raise BatchMixed(
                    f"the module's output {returned}{read} differs between batch entries 0 and {b}, whose "
                    "inputs are the same: the bias of one sequence depends on where it sits in the batch "
                    "(batch and heads mixed up, e.g. by a repeat_interleave or a view of [B*H, T, T])")
        return first
    if len(shape) in (3, 4) and shape[-1] == heads and shape[-3:-1] == (rows, cols):
        raise HeadsLast(
            f"the module returned shape {returned}, its heads on the last axis: attention logits are "
            f"[B, H, T, T], to which a [.., T, T, H] bias adds the wrong heads (or fails to broadcast); "
            "return [1, H, T, T] (Appendix E's permute(0, 3, 1, 2)) [conv.layout]")
    raise ValueError(f"the module returned shape {list(shape)}; expected [H, T, T], [1, H, T, T] or "
                     f"[B, H, T, T] with H = {heads}, T = {rows}" + ("" if rows == cols else f" x {cols}")
                     + (f" (x held B = {batch} sequences)" if batch > 1 else ""))


def as_numpy(a):
    """A torch tensor (any dtype, any device, with or without a graph) or array-like as a
    float64 NumPy array."""
    if torch is not None and isinstance(a, torch.Tensor):
        return a.detach().cpu().double().numpy()
    return np.asarray(a, dtype=np.float64)


def numpy_output(autodiff):
    """What a gradient case of a torch or JAX module returning a NumPy array finds."""
    return (f"the module returns a NumPy array (a .numpy() or np.asarray in its forward), which "
            f"{autodiff} cannot reach through: no parameter gets a gradient, so none would train "
            "[grad.vjp]; return the framework's tensor (to check the values alone, run without "
            "the gradient cases: --skip 'fire-grad/*')")
