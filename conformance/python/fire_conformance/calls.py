"""How a ready-made glue calls a FIRE module, shared by ``appendix_e`` (torch, NumPy) and
``jax_glue`` (Flax/JAX): the call style read from the module's parameter names, and for each case
what one call computes (``Plan``) and where each of the case's queries and keys sits in its output.

A style that can hand the module the case's positions does, so that a mistake shown only there
is caught rather than answered by the glue's gather [proto.hello]: a ``positions`` module gets the
case's positions themselves, unsorted and repeated as they are (a module that sorts them fails;
one that counts ``0..n`` in place of them is said to, ``check_positions_used``); a ``lengths``
module gets the decoding call, as many query rows as reach from the first query to the last key
(a module that returns the first rows of a shorter query block fails, ``decoding``); a
``scores`` module gets non-zero scores, which it must return added to the bias
(``logits.check_scores``); an ``x`` module gets a non-zero x as well, whose values must not
change the bias (``check_x``).
"""

import inspect

import numpy as np

from fire_conformance import kit as fire_kit

CALLS = ["x", "hidden", "scores", "scores_shape", "ids", "mask", "sequence", "seq_len", "seq_len_device",
         "lengths", "lengths_device", "qk_states", "positions", "qk"]
# The styles handing the module attention scores [B, H, T, T]: ``scores`` to return added to the
# bias, ``scores_shape`` (only by ``--call``) read for their shape, the bias returned alone for
# the caller to add.
SCORES_STYLES = ("scores", "scores_shape")
# The layouts of x a ``forward(x)`` found by introspection is tried with, in this order: ``ids``
# is a batch of token ids [B, T] (nanoGPT's ``forward(idx)``), whose length the module reads;
# ``sequence`` one sequence of hidden states [T, 1], no batch (Equinox's convention: a module
# written for one example and ``jax.vmap``-ed over the batch reads ``x.shape[0]``).
X_LAYOUTS = ["x", "hidden", "scores", "ids", "sequence"]
# The x layouts whose values the bias must not depend on (``check_x``): every one but scores.
VALUE_FREE = ("x", "hidden", "ids", "sequence")
# The x layouts holding a batch of sequences (``batch_of``); ``sequence`` holds one.
BATCHED = ("x", "hidden", "scores", "ids", "mask")
# The layouts of a ``forward(positions)``'s positions, in this order: a list [n], or
# ``position_ids`` of one sequence, [1, n] (a module that unpacks ``B, T = position_ids.shape``).
POSITION_LAYOUTS = ["positions", "position_ids"]
# An x of two sequences, not one, up to this length: a bias that differs between the sequences of
# a batch (batch and heads mixed up by a ``repeat_interleave`` or a ``view`` of [B·H, T, T]) fails
# there (``outputs.squeeze``), where at batch 1 it is right. Longer squares keep one sequence:
# a module's [B, H, T, T] is the run's memory there.
BATCHED_UP_TO = 512
LENGTH_NAMES = {"seq_len", "seq_length", "seqlen", "length", "len", "n", "t", "num_positions", "size"}
# A forward of two lengths, the queries' and the keys' (queries the last of the keys where fewer).
QUERY_LENGTH_NAMES = {"i", "query_length", "query_len", "q_len", "qlen", "q_length", "num_queries",
                      "n_queries", "tgt_len"}
KEY_LENGTH_NAMES = {"j", "key_length", "key_len", "k_len", "klen", "k_length", "num_keys", "n_keys",
                    "src_len"}
# A first parameter so named may be the attention (padding) mask [B, T] of ones and zeros, from
# which Hugging Face code makes the positions (``attention_mask.long().cumsum(-1) - 1``): tried
# first with a mask of ones, every token there (``mask``), never with zeros, which would pad them
# all away (``takes_mask``).
MASK_NAMES = {"attention_mask", "attn_mask", "padding_mask", "mask"}
POSITION_NAMES = {"positions", "position", "pos", "position_ids", "positions_ids", "idx", "indices"}
# Of those, the names other code gives a batch of token ids (nanoGPT's ``forward(idx)``): a module
# so named that takes no list of positions [n] and returns for a [1, n] the bias of 0..n whatever
# its values reads a [B, T] of tokens for its length, and is called so (``ids``), not failed for
# ignoring positions it was never given.
TOKEN_NAMES = {"idx", "indices"}
# A first parameter so named holds attention scores (or logits) the module is to add its bias to:
# its name has one of the words, or is one of the names.
SCORES_WORDS = ("score", "logit")
SCORES_NAMES = {"attn", "attention", "attn_weights", "attention_weights", "weights", "sim", "dots", "qk",
                "energy", "energies"}
# A forward of the attention's query and key tensors [B, H, T, D], reading only their lengths
# (``forward(q, k)``, ``forward(query_states, key_states)``): called as a decoding step, the new
# queries after the cached keys, as ``lengths`` is.
QUERY_STATE_NAMES = {"q", "query", "queries", "query_states", "q_states", "xq", "query_layer"}
KEY_STATE_NAMES = {"k", "key", "keys", "key_states", "k_states", "xk", "key_layer"}
# The styles called with the decoding step's query and key lengths, as numbers or as tensors.
DECODING_STYLES = ("lengths", "lengths_device", "qk_states")
# Which query rows ``forward(query_length, key_length)`` returns when there are fewer queries than
# keys: the last (x-transformers' ``forward(i, j)``, Hugging Face's decoding step: the new queries
# after the cached keys) or the first (T5's ``compute_bias``, whose caller slices the rows it needs).
QUERY_ROWS = ["last", "first"]


def batch_of(T):
    """How many sequences the x layouts hold for a square of length T."""
    return 2 if T <= BATCHED_UP_TO else 1


def positional(fn, skip=0):
    """The lower-cased names of ``fn``'s positional parameters past the first ``skip``, or None
    where its signature cannot be read."""
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][skip:]
    except (TypeError, ValueError):
        return None
    return [p.name.lower() for p in params]


def forward_of(m):
    """The method a glue calls: ``forward`` where the module has one, else ``__call__``."""
    return m.forward if hasattr(m, "forward") else m.__call__


def parameter_names(m):
    """The lower-cased names of the positional parameters of the method a glue calls."""
    return positional(forward_of(m)) or []


def call_style(m):
    """How to call the module, from the names of its forward's parameters."""
    names = positional(forward_of(m))
    return "x" if names is None else style_of(names)


def class_parameter_names(cls):
    """The lower-cased positional parameter names of ``cls``'s instances' call, read from the
    class before any is built (for the hello): its ``forward`` (or ``__call__``, or linen's
    ``apply``) less ``self`` and, for ``apply``, ``variables``; None where unreadable."""
    own = lambda name: next((k.__dict__[name] for k in getattr(cls, "__mro__", ())  # noqa: E731
                             if k not in (object, type) and name in k.__dict__), None)
    fn, skip = own("forward"), 1
    if fn is None:
        fn = own("__call__")
    if fn is None and callable(getattr(cls, "apply", None)):
        fn, skip = cls.apply, 2
    return positional(fn, skip)


def class_call_style(cls):
    """``call_style`` of ``cls``'s instances, read from the class (``class_parameter_names``)."""
    names = class_parameter_names(cls)
    return "x" if names is None else style_of(names)


def class_positions(cls, call, query_rows="last"):
    """The hello's ``positions`` for ``cls`` called as ``call`` (None: as its parameters say):
    ``positions`` (``lists``) but ``square`` where its first parameter may be token ids
    (``TOKEN_NAMES``), which ``reads_tokens`` then calls with ``ids`` and gathers from — a
    report that counted its lists as the module's own would claim what never ran."""
    if call is None and (class_parameter_names(cls) or [None])[0] in TOKEN_NAMES:
        return "square"
    return positions(call or class_call_style(cls), query_rows)


def style_of(names):
    """The call style of a forward whose positional parameters (``self`` left out) are
    ``names``, lower-cased."""
    if len(names) >= 2 and names[1] == "device" and names[0] in LENGTH_NAMES:
        return "seq_len_device"
    if names and names[0] in LENGTH_NAMES:
        return "seq_len"
    if len(names) >= 2 and names[0] in QUERY_LENGTH_NAMES and names[1] in KEY_LENGTH_NAMES:
        return "lengths_device" if len(names) >= 3 and names[2] == "device" else "lengths"
    if len(names) >= 2 and names[0] in QUERY_STATE_NAMES and names[1] in KEY_STATE_NAMES:
        return "qk_states"
    if len(names) >= 2 and all(n in POSITION_NAMES or "pos" in n for n in names[:2]) \
            and ("q" in names[0] or "query" in names[0]):
        return "qk"
    if names and names[0] in POSITION_NAMES:
        return "positions"
    return "x"


def takes_mask(names):
    """Whether a forward whose positional parameters are ``names`` says by its first one's name
    that it may be given a padding mask (``MASK_NAMES``): the ``mask`` layout is tried first
    for it, then the other layouts of x (an additive mask ``[B, 1, T, T]`` it returns the bias
    added to is attention scores to the glue)."""
    return bool(names) and names[0] in MASK_NAMES


def takes_scores(names):
    """Whether a forward whose positional parameters are ``names`` says by its first one's name
    that it is given attention scores to add the bias to (``scores``, ``attn_logits``, ``sim``):
    such a module is called with scores only, never with another layout of x, which would let
    it ignore them unseen."""
    if not names:
        return False
    first = names[0]
    return first in SCORES_NAMES or any(w in first for w in SCORES_WORDS)


def positions(style, query_rows="last"):
    """The hello's ``positions`` ([proto.hello]) for a call style: ``lists`` where every case's
    positions reach the module as far as its interface can take them (``qk`` and ``positions``
    the lists themselves, ``lengths`` the decoding call of the last query rows), ``square``
    where the module computes the whole square 0..T and the glue picks out rows and columns."""
    if style in ("qk", "positions"):
        return "lists"
    if style in DECODING_STYLES and query_rows == "last":
        return "lists"
    return "square"


class Plan:
    """One call of the module for a case: ``style``; ``args``, what the style passes besides x
    (lengths, or position lists); ``shape``, the ``(rows, columns)`` of the bias it returns;
    ``rows`` and ``cols``, the output row of each of the case's queries and the column of each
    key; ``batch``, the sequences an x layout holds."""

    def __init__(self, style, args, shape, rows, cols, batch=1):
        self.style, self.args, self.shape, self.batch = style, args, shape, batch
        self.rows, self.cols = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)

    def x_shape(self, heads):
        """The shape of x for a call in one of the x layouts (``X_LAYOUTS``), else None."""
        rows, cols = self.shape
        return {"x": (self.batch, heads, rows, 1), "hidden": (self.batch, rows, 1),
                "scores": (self.batch, heads, rows, cols), "scores_shape": (self.batch, heads, rows, cols),
                "ids": (self.batch, rows), "mask": (self.batch, rows),
                "sequence": (rows, 1)}.get(self.style)

    def states(self, heads):
        """The shapes of the query and key tensors of a ``qk_states`` call, [B, H, rows, 1] and
        [B, H, columns, 1]."""
        rows, cols = self.shape
        return (self.batch, heads, rows, 1), (self.batch, heads, cols, 1)

    def pick(self, full):
        """The case's ``[H, queries, keys]`` from the call's ``[H, rows, columns]`` output."""
        full = np.asarray(full)
        return full[:, self.rows, :][:, :, self.cols]

    def cotangent(self, cot):
        """The case's cotangent ``[H, queries, keys]`` spread over the call's output: repeated
        positions add up, as they do in the sum the cotangent defines."""
        g = np.zeros((cot.shape[0],) + tuple(self.shape), dtype=np.float64)
        np.add.at(g, (slice(None), self.rows[:, None], self.cols[None, :]), cot)
        return g


# The largest T x T square evaluated where ``--max-len`` is not given: a memory bound, which a
# list of positions (as long as its positions, whatever their values) does not reach.
DEFAULT_MAX_LEN = fire_kit.SQUARE_LIMIT


def plan(style, case, max_len=None, query_rows="last"):
    """The call of ``style`` that computes ``case`` (a ``Skip`` where it would need a square past
    ``max_len`` on a side). See the module docstring for what each style is handed.

    ``max_len`` is the user's ``--max-len`` (``None``: not given). Given, it is the module's
    context: a list of positions reaching position ``max_len`` skips as the square of that length
    would, so a module keeping a table of ``max_len`` positions is graded up to its context
    through either call, never failed past it. Not given, squares stop at ``DEFAULT_MAX_LEN`` and
    lists of positions go as far as the case's (10⁶ included)."""
    q, k = list(case.queries), list(case.keys)
    T = case.length
    bound = DEFAULT_MAX_LEN if max_len is None else max_len
    if style == "qk" or style in POSITION_LAYOUTS:
        if max_len is not None and T > max_len:
            raise fire_kit.Skip(f"needs position {T - 1} (past --max-len {max_len})")
    if style == "qk":
        return Plan(style, (q, k), (len(q), len(k)), range(len(q)), range(len(k)))
    if style in POSITION_LAYOUTS:
        # The lists themselves where the queries are the keys, else the queries followed by the
        # keys, as they are (unsorted and repeated included), and the rows and columns picked
        # from that.
        listed = q if q == k else q + k
        if len(listed) > bound:
            raise fire_kit.Skip(f"needs {len(listed)} positions (> --max-len {bound})")
        cols = range(len(k)) if q == k else range(len(q), len(q) + len(k))
        return Plan(style, (listed,), (len(listed), len(listed)), range(len(q)), cols)
    if style in DECODING_STYLES:
        # Keys 0..T-1; queries the last T - first of them (the decoding call), or the first
        # last + 1 where the module returns the first rows.
        first = min(q) if query_rows == "last" else 0
        n = T - first if query_rows == "last" else max(q) + 1
        if T > bound:
            raise fire_kit.Skip(f"needs {T} keys (> --max-len {bound})")
        batch = batch_of(T) if style == "qk_states" else 1
        return Plan(style, (n, T), (n, T), [p - first for p in q], k, batch=batch)
    if T > bound:
        raise fire_kit.Skip(f"needs a {T} x {T} square (> --max-len {bound})")
    if style not in CALLS:
        raise SystemExit(f"unknown --call {style!r}; one of {CALLS}")
    return Plan(style, (T,), (T, T), q, k, batch=batch_of(T) if style in BATCHED else 1)


def counted(listed, always=False):
    """The positions a ``positions`` call of ``listed`` is repeated with (``check_positions_used``):
    ``0..n``, or ``0, 2, 4, …`` or ``0, 3, 6, …`` where the distances between ``listed``'s
    positions are those of ``0..n`` (``p, p + 1, …``, or the same reversed, whose bias below L
    is 0..n's): a module reading the positions then returns another bias, since FIRE's moves with
    the distances; one that counts returns the same. None for fewer than two positions, or for
    ``0..n`` itself, on which a module that counts is right — unless ``always`` (a module that
    may read token ids, ``TOKEN_NAMES``: told apart on the first case), which gets ``0, 2, 4, …``
    there."""
    n = len(listed)
    if n < 2:
        return None
    if list(listed) == list(range(n)):
        return (np.arange(n, dtype=np.int64) * 2).tolist() if always else None
    given = np.asarray(listed, dtype=np.int64)
    distances = np.abs(given[:, None] - given[None, :])
    for step in (1, 2, 3):
        probe = np.arange(n, dtype=np.int64) * step
        if not np.array_equal(distances, np.abs(probe[:, None] - probe[None, :])):
            return probe.tolist()
    return None


class PositionsIgnored(fire_kit.Mistake, ValueError):
    """A ``forward(positions)`` that counts its positions rather than reading them."""


def check_positions_used(bias, counting, listed, probe):
    """Checks a ``positions`` call: ``bias`` [H, n, n] is the module's output for the case's
    positions ``listed``, ``counting`` its output for ``probe`` (``counted``; float64 NumPy arrays
    both). Their distances differ, so a module that reads the positions computes other values
    (unless its bias is one constant per head, as a zero f_θ is); one that returns exactly the
    same uses only their count or their indices (or a cache keyed on the count), and is said
    to, for the case's failure alone would not name it where its lists were concatenated
    [conv.positions]."""
    same = np.array_equal(bias, counting, equal_nan=True)
    flat = bias.reshape(bias.shape[0], -1)
    varies = any(len(np.unique(row[np.isfinite(row)])) > 1 for row in flat)
    if same and varies:
        shown = listed if len(listed) <= 8 else listed[:8] + ["…"]
        other = probe if len(probe) <= 8 else probe[:8] + ["…"]
        raise PositionsIgnored(
            f"forward(positions) returned exactly the same bias for the positions {shown} as for "
            f"{other}, whose distances differ: it uses their count or their indices (or a bias cached "
            "by their count), not their values, so gapped, unsorted and KV-cache positions get the "
            "bias of the wrong distances [conv.positions]")


def unmasked(bias):
    """The entries of ``bias`` a probe's check compares: finite, and above −1e3 (a ``masked``
    module's −∞ or large negative value is no bias value)."""
    return np.isfinite(bias) & (bias > -1e3)


# The x probes' seeds (with the shape): one x repeated over the batch, and one per sequence.
SEED, VARIED_SEED = 7, 8


def reads_tokens(names, call, layout, errors, e):
    """Whether a ``forward`` whose parameters are ``names``, called in the positions layouts
    (no ``--call`` given: ``call``), is one reading a batch of token ids rather than positions:
    its first parameter is one of ``TOKEN_NAMES``, a list ``[n]`` failed (on this case, among
    ``errors``, or on the one that chose the ``layout`` ``position_ids``) and a ``[1, n]`` was
    read only for its count (``e``, a ``PositionsIgnored``). Such a module is called with
    ``ids``."""
    refused = layout == "position_ids" or any(style == "positions" for style, _ in errors)
    return (call is None and bool(names) and names[0] in TOKEN_NAMES and isinstance(e, PositionsIgnored)
            and refused)


def may_read_tokens(names, call, style):
    """Whether a ``position_ids`` call of a module whose parameters are ``names`` is checked for
    reading only the count even on ``0..n`` (``counted``'s ``always``)."""
    return call is None and style == "position_ids" and bool(names) and names[0] in TOKEN_NAMES


LENGTH_STYLES = ("seq_len", "seq_len_device", "lengths", "lengths_device")
# The styles handing the module positions themselves, which go past any square the run evaluates.
LIST_STYLES = ("qk", *POSITION_LAYOUTS)


def past_context(style, case, max_len, e):
    """``e`` retold for a call handing positions (``LIST_STYLES``) that raised it on a case whose
    positions reach past every square the run evaluates, no ``--max-len`` given: a module whose
    context ends sooner (a table of N positions) is told to declare it, as a ``forward(x)``
    module of that context would have skipped the case. ``None`` elsewhere."""
    if style not in LIST_STYLES or max_len is not None or case.length <= DEFAULT_MAX_LEN:
        return None
    from fire_conformance.outputs import retold  # outputs imports this module

    return retold(e, f"{(str(e).splitlines() or [''])[0]} (the module was handed positions up to "
                     f"{case.length - 1}; one whose context ends sooner declares it with --max-len N, "
                     "and the cases past it skip)")


def as_lengths_failed(style, names, e):
    """The error of a call in a lengths style (``LENGTH_STYLES``, chosen from the parameters'
    names ``names``, no ``--call`` given) that raised ``e``: ``e`` told with what the module was
    given and the ``--call`` that hands it positions, where a name read as a length (``t``,
    ``i, j``) holds position tensors."""
    text = (f"{(str(e).splitlines() or [''])[0]} (forward({', '.join(names)}) was "
            f"called with {'a length' if style.startswith('seq_len') else 'the lengths of the queries and keys'}"
            ", as its parameters' names read; if it takes position tensors, --call positions (one list) or "
            "--call qk (the queries', the keys') hands it those)")
    from fire_conformance.outputs import retold  # outputs imports this module

    return retold(e, text)


def token_note(name):
    """The note of a module called with ``ids`` after ``reads_tokens``."""
    return (f"forward({name}) takes no list of positions [n] and reads a [1, n] only for its length: "
            f"`{name}` read as token ids [B, T] (nanoGPT's), its bias over 0..T−1 gathered; "
            "--call positions grades it as a forward(positions) that ignores their values")


def ids_probe(shape, varied=False):
    """Non-zero token ids of ``shape`` ([B, T], ``Plan.x_shape`` of ``ids``), int64, the same for
    every sequence of the batch unless ``varied``: an ``ids`` call's ``x_probe``."""
    rng = np.random.default_rng([VARIED_SEED if varied else SEED] + list(shape))
    if varied:
        return rng.integers(1, 50_000, size=tuple(shape), dtype=np.int64)
    one = rng.integers(1, 50_000, size=(1,) + tuple(shape[1:]), dtype=np.int64)
    return np.repeat(one, shape[0], axis=0)


def probe_for(style, shape, varied=False):
    """The non-zero x a ``VALUE_FREE`` call is checked with (``check_x``)."""
    return ids_probe(shape, varied) if style == "ids" else x_probe(shape, varied)


def x_probe(shape, varied=False):
    """A non-zero x of ``shape`` (an x layout's, ``Plan.x_shape``) in float32, the same for every
    call of a shape and for every sequence of its batch (whose bias must not differ, ``squeeze``):
    what an ``x`` or ``hidden`` call hands the module besides zeros (``check_x``). ``varied``:
    each sequence its own values, four times larger (``check_x_varied``)."""
    rng = np.random.default_rng([VARIED_SEED if varied else SEED] + list(shape))
    if varied:
        return 4 * rng.standard_normal(tuple(shape), dtype=np.float32)
    one = rng.standard_normal((1,) + tuple(shape[1:]), dtype=np.float32)
    return np.repeat(one, shape[0], axis=0)


class XAdded(ValueError):
    """A ``forward(x)`` that returned x + bias: it takes x for attention scores, a layout of its
    own (``X_LAYOUTS``' ``scores``), so the next layout is tried."""


class XMisused(fire_kit.Mistake, ValueError):
    """A ``forward(x)`` whose bias depends on x's values, not only on its shape."""


def check_x(bias, probed, x, dtype):
    """Checks an ``x`` or ``hidden`` call: ``bias`` [H, R, C] is the module's output for x of
    zeros, ``probed`` ([H, R, C], float64 NumPy arrays both) its output for the non-zero ``x``
    (``x_probe``). FIRE's bias depends on positions alone [fire.bias]: a module that reads only
    x's shape (its length, device, dtype) returns the same bias for both and passes; one that
    returns x + bias takes x for scores, and is tried in that layout (``XAdded``); any other
    dependence on x's values (``x * 0.125 + bias``, a mask read from x) is refused saying by how
    much, for with x of zeros alone it would pass unseen. Entries the bias masks (non-finite, or
    ≤ −1e3 under ``masked``) are left out."""
    keep = unmasked(bias)
    scale = max(1.0, float(np.max(np.abs(bias), where=keep, initial=0.0)))
    allowed = ROUNDING[dtype] * scale
    with np.errstate(invalid="ignore"):
        moved = float(np.nan_to_num(np.max(np.abs(probed - bias), where=keep, initial=0.0), nan=np.inf))
    if moved <= allowed:
        return
    try:
        given = np.broadcast_to(np.asarray(x[0], dtype=np.float64), bias.shape)
    except ValueError:
        given = None
    if given is not None:
        with np.errstate(invalid="ignore"):
            added = float(np.nan_to_num(np.max(np.abs(probed - given - bias), where=keep, initial=0.0),
                                        nan=np.inf))
        if added <= ROUNDING[dtype] * (scale + float(np.max(np.abs(given)))):
            raise XAdded(f"forward(x) with x as {list(x.shape)} returned x + bias (x broadcast): it takes x "
                         "for attention scores")
    raise XMisused(
        f"forward(x)'s output depends on the values of x, not only on its shape: given a non-zero x of "
        f"shape {list(x.shape)}, it differs from its output at x = 0 by up to {moved:.3g} (allowed "
        f"{allowed:.3g}); FIRE's bias depends on the positions alone [fire.bias], so in a model the "
        "hidden states would leak into it; take from x only its length, device and dtype")


def check_x_varied(bias, probed, x, heads, dtype):
    """Checks an ``x`` or ``hidden`` call, once ``check_x`` passed, with an x whose sequences
    differ (``x_probe(varied=True)``): ``probed`` is the module's output for it as returned
    (``[H, R, C]``, ``[1, H, R, C]``, ``[B, H, R, C]`` or ``[B·H, R, C]``, a float64 NumPy
    array), each of whose sequences must have the bias ``bias`` [H, R, C]. A module reading x
    only through the differences between its sequences (``x - x.mean(0)``), which an x repeated
    over the batch leaves at zero, is refused; an output of another shape is left to the graded
    call's checks."""
    B = x.shape[0]
    if probed.ndim == 3 and probed.shape[0] == B * heads and B > 1:
        probed = probed.reshape((B, heads) + probed.shape[1:])
    entries = probed if probed.ndim == 4 else probed[None]
    if entries.shape[1:] != bias.shape:
        return
    keep = unmasked(bias)
    scale = max(1.0, float(np.max(np.abs(bias), where=keep, initial=0.0)))
    allowed = ROUNDING[dtype] * scale
    with np.errstate(invalid="ignore"):
        moved = float(np.nan_to_num(np.max(np.abs(entries - bias[None]), where=keep[None], initial=0.0),
                                    nan=np.inf))
    if moved > allowed:
        raise XMisused(
            f"forward(x)'s output depends on the values of x, not only on its shape: given an x of "
            f"shape {list(x.shape)} whose sequences differ, the bias differs from its output at x = 0 "
            f"by up to {moved:.3g} (allowed {allowed:.3g}), though an x the same for every sequence "
            "left it unchanged: it reads x through the differences between the batch's sequences "
            "(a mean or a normalisation over the batch); FIRE's bias depends on the positions alone "
            "[fire.bias]; take from x only its length, device and dtype")


# A relative rounding allowance per --dtype for the probes' checks (``logits.check_scores``): the
# bias added to scores and
# the scores taken away again round twice at the scale of both.
ROUNDING = {"f64": 2.0**-48, "f32": 2.0**-19, "bf16": 2.0**-5}
