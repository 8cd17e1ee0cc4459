"""fire_conformance.decoding: the decoding step a KV cache makes, checked against the module's
own square. A module called with the queries' and keys' lengths must return the last query rows
(``check_last_rows``: the first are T5's convention, declared with ``--query-rows first``), and one
whose forward also takes the cache's length (``past_key_values_length``, ``start_pos``) is called
once more with the square's first half cached and must return the square's last rows over every
key (``check_past``): a decoding step with a cache gets the bias the same tokens get without
one. spec: [conv.positions], [fire.bias]
"""

import inspect

import numpy as np

from fire_conformance import kit as fire_kit
from fire_conformance.calls import ROUNDING, forward_of, unmasked


def closeness(square, dtype):
    """Whether two parts of a module's bias are the same within ``dtype``'s rounding at the
    scale of its ``square``'s unmasked entries (masks and NaN equal to themselves)."""
    allowed = ROUNDING[dtype] * max(1.0, float(np.max(np.abs(square), initial=0.0, where=unmasked(square))))
    return lambda a, b: bool(np.all((np.abs(a - b) <= allowed) | (a == b) | (np.isnan(a) & np.isnan(b))))


def check_last_rows(rows, square, dtype, style="lengths"):
    """Checks a decoding call's output ``rows`` ([H, n, T], n < T, meant to be the last n query
    rows) against the same module's ``square`` ([H, T, T]): one that equals the square's first
    rows instead is the other convention, said as such, for the case's failure alone would
    not say why (``--query-rows first`` declares it). Arrays or tensors ``np.asarray`` takes;
    ``style`` the call's (``DECODING_STYLES``), for the message."""
    rows = np.asarray(rows, dtype=np.float64)
    square = np.asarray(square, dtype=np.float64)
    n = rows.shape[1]
    close = closeness(square, dtype)
    if close(rows, square[:, :n]) and not close(rows, square[:, -n:]):
        T = square.shape[1]
        call = (f"forward(q, k) with {n} queries and {T} keys" if style == "qk_states"
                else f"forward({n}, {T})")
        raise QueryRows(
            f"{call} returned the first {n} query rows of the {T} x {T} square, not the last: "
            "a decoding step (new queries after cached keys) would get the bias of the first "
            "queries; return the last rows (x-transformers' forward(i, j)), or, if the module's "
            "callers pass the full query length and slice (T5's compute_bias), declare "
            "--query-rows first")


class QueryRows(fire_kit.Mistake, ValueError):
    """A ``lengths`` module returning the first query rows where the last are asked."""


# A keyword parameter so named is how many positions the cache holds before x's (Hugging Face's
# ``past_key_values_length``, Llama's ``start_pos``): x's tokens are at past..past+n-1, and the
# keys are every position 0..past+n-1.
PAST_NAMES = ("past_key_values_length", "past_key_value_length", "past_length", "past_len",
              "start_pos", "cache_offset")
# The x layouts a past length applies to: a batch or a sequence of tokens, not scores.
PAST_LAYOUTS = ("x", "hidden", "ids", "sequence", "mask")


def past_name(m, call=None):
    """The name of the keyword parameter of ``m``'s forward (``forward_of``; ``call`` where given:
    a JAX module's ``__call__`` or ``apply``) that takes the cache's length (``PAST_NAMES``), or
    None."""
    try:
        params = inspect.signature(call if call is not None else forward_of(m)).parameters
    except (TypeError, ValueError):
        return None
    return next((p for p in params if p.lower() in PAST_NAMES), None)


def with_length(shape, style, n):
    """An x layout's ``shape`` (``Plan.x_shape``) holding ``n`` tokens in place of its T."""
    shape = list(shape)
    shape[{"x": 2, "hidden": 1, "ids": 1, "mask": 1, "sequence": 0}[style]] = n
    return tuple(shape)


def cached_lengths(T):
    """The cache lengths a decoding probe of a ``T``-square takes: its first half (a prefill of
    the rest) and all but its last token (the step a generation loop makes, where a module may
    take another path for one new token)."""
    return sorted({T // 2, T - 1})


def check_past(rows, square, past, name, dtype, returned=None):
    """Checks the decoding call of a module taking the cache's length (``past_name``): ``rows``,
    its output for the square's last n tokens with ``name=past`` (squeezed to ``[H, n, C]``, or
    None where its shape is not a bias's), must be the last n rows of ``square`` ([H, T, T], T =
    past + n, the module's own bias over 0..T-1): the queries at past..T-1 and every key 0..T-1.
    A forgotten offset or keys counted from the new tokens alone are refused saying which
    (``returned``: the raw output's shape, for the message)."""
    square = np.asarray(square, dtype=np.float64)
    H, T, _ = square.shape
    n = T - past
    call = f"forward(x of {n} token{'s' if n != 1 else ''}, {name}={past})"
    want = square[:, past:, :]
    if rows is None or np.shape(rows) != want.shape:
        got = list(np.shape(rows)) if rows is not None else returned or "another shape"
        raise PastIgnored(
            f"{call} returned {got} where the bias of its {n} queries over the {T} keys, cached and "
            f"new, is [{H}, {n}, {T}]: a decoding step's attention spans the cache too; take the keys "
            f"as positions 0..{name} + n - 1")
    rows = np.asarray(rows, dtype=np.float64)
    close = closeness(square, dtype)
    if close(rows, want):
        return
    first = " (they are the first rows of the square: the offset is not applied)" \
        if close(rows, square[:, :n, :]) else ""
    last, new = (f"the last {n} rows", f"the new tokens are at positions {past}..{T - 1}") if n > 1 \
        else ("the last row", f"the new token is at position {past}")
    raise PastIgnored(
        f"{call} returned another bias than {last} of its own {T} x {T} square{first}: {new} and "
        f"the keys at 0..{T - 1}, so a decoding step with a cache gets another bias than the same "
        "tokens without one")


class PastIgnored(fire_kit.Mistake, ValueError):
    """A module taking the cache's length whose decoding call is not its square's last rows."""
