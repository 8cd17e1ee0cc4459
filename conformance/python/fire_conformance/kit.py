"""fire_conformance.kit: the implementation side of the fire-conformance protocol, in plain Python.
(In the repository also importable as ``fire_kit`` from ``conformance/adapters``.)

Write one function, ``build(case)``, that returns the requested output, and call
``serve(build, name=...)``. The kit does the rest: the handshake, one reply per request, the
encoding of NaN and infinities, turning exceptions into ``errored`` replies (the right answer to
an invalid case), and ``Skip`` into ``skipped``, with standard output kept for the replies (what
``build`` prints goes to standard error). See spec/protocol.md.

Most FIRE modules compute the full T x T bias for positions 0..T-1. ``case.gather(full)`` picks the
requested rows and columns out of such a square, so those modules also run the non-contiguous,
unsorted and KV-cache cases.

Standard library only; numpy is used when ``build`` returns numpy arrays (anything with
``.shape`` and ``.tolist()`` works, including torch tensors moved to the CPU), and by the check
of values and gradients at a long length once ``build`` has answered a FIRE case
(``long_length.check_kit``).
"""

import json
import math
import os
import sys

PROTOCOL = 1


class Skip(Exception):
    """Raise from build(case) to reply ``skipped`` with the message as the reason."""


class Mistake(Exception):
    """Raise from build(case) when a check of the glue's own finds the module wrong (it drops the
    attention scores it is given, keeps a stale bias, holds c frozen): the reply is ``errored``
    with ``"cause": "module"``, a failure of the module that the harness never reads as a broken
    adapter [proto.reply]."""


class UnsupportedDtype(Skip):
    """Raise from build(case) when the module cannot compute in the requested dtype (it raised a
    dtype error, or returned another dtype). The harness holds such a skip to the whole of an
    encoding and kind of case: if other cases of the same encoding and kind come back with
    outputs, this case fails, since a dtype that changes with the input is a bug on that input."""


def _decode(v):
    if isinstance(v, str):
        special = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
        if v in special:
            return special[v]
    return v


def _encode(x):
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def _flatten(value):
    """(shape, flat list) of a numpy/torch array, nested lists (of numbers, or of arrays: a list
    of per-head arrays stacks), or a Python scalar. Anything else, or a ragged list, raises a
    ``TypeError``/``ValueError`` saying what was found where a number belongs."""
    if hasattr(value, "detach"):
        value = value.detach().cpu().double().numpy()
    if hasattr(value, "shape") and hasattr(value, "reshape"):
        return list(value.shape), [_encode(x) for x in value.reshape(-1).tolist()]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [], [_encode(value)]
    shape, flat, leaves = [], [], set()

    def walk(v, depth):
        if hasattr(v, "detach"):
            v = v.detach().cpu().double().tolist()
        elif hasattr(v, "shape") and hasattr(v, "tolist"):
            v = v.tolist()
        if isinstance(v, (list, tuple)):
            if len(shape) <= depth:
                shape.append(len(v))
            elif shape[depth] != len(v):
                raise ValueError(f"ragged: {shape[depth]} and {len(v)} entries at depth {depth}")
            for x in v:
                walk(x, depth + 1)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            leaves.add(depth)
            flat.append(_encode(v))
        else:
            raise TypeError(f"it holds {type(v).__name__} {str(v)[:40]!r} where a number belongs")
        if len(leaves) > 1:
            raise ValueError("ragged: numbers at different depths")

    walk(value, 0)
    return shape, flat


def _described(value):
    """What ``build`` returned, in a few words, for a message."""
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)}"
    return "None" if value is None else type(value).__name__


def _message(e):
    """An exception as a reply's message; one without a message (a bare ``assert``) says where
    it was raised."""
    said = f"{type(e).__name__}: {e}"
    if not str(e):
        import traceback
        frames = traceback.extract_tb(e.__traceback__)
        if frames:
            f = frames[-1]
            said = (f"{type(e).__name__} (no message; raised at {os.path.basename(f.filename)}:"
                    f"{f.lineno}: `{f.line}`)")
    return said


class Tensor:
    """A tensor from a request: ``shape`` and flat row-major ``data`` (floats, NaN decoded)."""

    def __init__(self, obj):
        self.shape = list(obj["shape"])
        self.data = [_decode(v) for v in obj["data"]]

    def array(self):
        import numpy as np

        return np.asarray(self.data, dtype=np.float64).reshape(self.shape)


class Case:
    """One request [proto.request]. ``encoding`` and ``inputs`` are the JSON of spec/vectors.md,
    with every ``{"shape", "data"}`` mapping turned into a ``Tensor`` (``.array()``: NumPy) and
    every non-finite string into a float.

    Attributes: ``id`` (``family/file/name``), ``kind`` (what to return, [vec.outputs]),
    ``dtype`` (``f64``, ``f32`` or ``bf16``: compute in it), ``outputs`` (the names the reply
    carries), ``encoding`` (``type``, ``mlp`` layers of ``weight`` ``[out, in]`` and ``bias``,
    ``c``, ``l_init``, ``l_multiplier``, ``eps``, ``threshold``, …), ``inputs`` and the position
    lists ``queries`` and ``keys`` (row ``q`` and column ``k`` of every output). By kind:

    - ``bias``: return the bias ``[H, len(queries), len(keys)]`` (output ``bias``).
    - ``vjp``: ``inputs["cotangent"]`` is G, shaped like the bias; return a dict of the
      gradients of Σ G ⊙ bias, one per name in ``outputs`` (``c``, ``L_multiplier``,
      ``mlp.0.weight`` ``[out, in]``, ``mlp.0.bias``, …: Appendix E's state dict), each
      shaped as the encoding holds that parameter (``c`` a scalar).
    - ``attention``: ``inputs["q"]``, ``["k"]``, ``["v"]`` are ``[H, Q, d]``, ``[H, K, d]``,
      ``[H, K, d_v]``; return causal attention with the bias added to the scaled scores,
      ``[H, Q, d_v]`` (output ``output``).
    """

    def __init__(self, msg):
        self.id = msg["id"]
        self.kind = msg["kind"]
        self.dtype = msg.get("dtype", "f64")
        self.outputs = msg.get("outputs", [])
        self.encoding = self._tensors(msg["encoding"])
        self.inputs = self._tensors(msg["inputs"])
        self.queries = list(self.inputs["queries"])
        self.keys = list(self.inputs["keys"])
        self.notes = []

    def note(self, text):
        """Says something about how this case was answered that a reader of the report should
        know (how a glue read the module's parameters): sent as the reply's ``note``, printed
        with the case and once per distinct text over the run, never graded [proto.reply].
        Several notes on one case are joined with "; "; None says nothing."""
        if text is None:
            return
        text = " ".join(str(text).split())
        if text and text not in self.notes:
            self.notes.append(text)

    @classmethod
    def _tensors(cls, v):
        if isinstance(v, dict):
            if "shape" in v and "data" in v:
                return Tensor(v)
            return {k: cls._tensors(x) for k, x in v.items()}
        if isinstance(v, list):
            return [cls._tensors(x) for x in v]
        return _decode(v)

    def shape_of(self, name):
        """The shape of parameter ``name`` (Appendix E's state-dict names) in this case's
        encoding, which its gradient has [grad.layout]: ``[]`` for ``c`` and ``L_multiplier``,
        the n-th layer's for ``mlp.{2n}.weight`` (``[out, in]``) and ``mlp.{2n}.bias``."""
        if name in ("c", "L_multiplier"):
            return []
        parts = name.split(".")
        layers = (self.encoding.get("mlp") or {}).get("layers", [])
        if len(parts) == 3 and parts[0] == "mlp" and parts[1].isdigit() and int(parts[1]) % 2 == 0 \
                and parts[2] in ("weight", "bias") and int(parts[1]) // 2 < len(layers):
            return list(layers[int(parts[1]) // 2][parts[2]].shape)
        raise KeyError(f"this case's encoding has no parameter {name!r}")

    @property
    def family(self):
        return self.id.split("/")[0]

    @property
    def length(self):
        """T of the smallest square 0..T-1 holding every requested position."""
        return max(self.queries + self.keys) + 1

    def check_positions(self):
        """Raise ValueError on empty, negative or too large positions (they must be rejected)."""
        if not self.queries or not self.keys:
            raise ValueError("empty position list")
        for p in self.queries + self.keys:
            if p < 0:
                raise ValueError(f"negative position {p}")
            if p > 2**53:
                raise ValueError(f"position {p} exceeds 2^53")

    def gather(self, full):
        """Rows ``queries`` and columns ``keys`` of a ``[..., T, T]`` square over 0..T-1."""
        import numpy as np

        full = np.asarray(full)
        return full[..., self.queries, :][..., self.keys]


# Where replies go once ``reserve_stdout`` has run: the process's original standard output.
_replies = None


def reserve_stdout():
    """Keeps the real standard output for protocol replies and sends everything else written to
    it (``print``, logging configured with ``stream=sys.stdout``, C extensions, child processes)
    to standard error, and returns the stream replies go to. A stray line on standard output is
    read as a reply and fails the case, or the handshake [proto.framing]; a module's leftover debug
    print is no FIRE mistake, so the glue entry points call this before they import user code,
    and ``serve`` before it answers. Idempotent; a ``sys.stdout`` that is no file (captured in a
    test) is left as it is and used for replies."""
    global _replies
    if _replies is not None:
        return _replies
    sys.stdout.flush()
    try:
        fd = sys.stdout.fileno()
        err = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        _replies = sys.stdout
        return _replies
    _replies = os.fdopen(os.dup(fd), "w", encoding="utf-8")
    os.dup2(err, fd)
    sys.stdout = sys.stderr
    return _replies


def _send(obj):
    out = reserve_stdout()
    out.write(json.dumps(obj, allow_nan=False) + "\n")
    out.flush()


def _reply(case, obj):
    """A result line, with the case's notes (``Case.note``) where it has any."""
    if case is not None and case.notes:
        obj["note"] = "; ".join(case.notes)
    _send(obj)


# The longest square 0..T-1 a ``positions="square"`` glue is handed unless it declares
# ``max_len``: the ready-made glues' bound too (``calls.DEFAULT_MAX_LEN``).
SQUARE_LIMIT = 4096


def _out_of_memory(e):
    """Whether ``e`` is a framework's allocation failure (torch raises a ``RuntimeError``,
    not ``MemoryError``): the machine's limit, not a FIRE mistake."""
    text = str(e)
    return isinstance(e, RuntimeError) and any(w in text for w in (
        "tried to allocate", "not enough memory", "out of memory", "Out of memory"))


def serve(build, name, families=("*",), dtypes=("f64",), future_keys="mirrored",
          placement="after-scaling", stdin=None, positions="lists", max_len=None, long_length=True,
          state="fresh"):
    """Answer the harness until it says bye. ``build(case)`` returns one output (for a single
    requested output) or a dict of outputs by name. Anything else written to standard output
    from here on goes to standard error (``reserve_stdout``). ``positions="square"`` tells the
    harness that ``build`` computes every bias over positions 0..T and picks out the asked rows
    and columns (``case.gather``), so the module never sees a case's position lists: the
    report then says its own handling of them (a decoding call) was not run [proto.hello].
    ``max_len``: the module's context, T at most; a valid case reaching past it is skipped
    before ``build`` is called. A ``"square"`` glue stops at ``SQUARE_LIMIT`` unless it says
    otherwise: the suite's positions reach 10⁶, whose square no memory holds (``math.inf``: no
    bound, for a glue that bounds its calls itself, as the ready-made glues do).

    ``state``: ``"fresh"`` (the default) says each case is computed by a module built for it,
    so a cache that a parameter update leaves stale never shows, and the report says so;
    ``"stepped"`` that ``build`` calls the module, changes its parameters as an optimiser's step
    does, and only then loads the case's values and computes (the ready-made glues); None says
    nothing (an implementation that is no module) [proto.hello].

    ``long_length``: once per run, on the first FIRE bias case and the first FIRE gradient case
    that tell (``long_length.tells``) and whose output ``build`` computes as FIRE's, ``build``
    is also asked for a copy of the case over ``long_length.LENGTH`` positions (fewer under
    ``max_len``), and a path it takes only for long sequences (an input quantised or a ``no_grad`` past some length) fails that case
    (``LongBias``, ``LongGradient``); off for a glue that makes the check itself, with the
    module in hand (the ready-made ones), or that is FIRE's own computation (``numpy_fire``)."""
    if max_len is None and positions == "square":
        max_len = SQUARE_LIMIT
    # The kinds of case (FIRE's bias, its gradients) not yet checked at a long length.
    long_unchecked, timeout = {"bias", "vjp"} if long_length else set(), None
    reserve_stdout()
    stdin = stdin or sys.stdin
    # One name given as a string is one name, not its letters ("fire" had been sent as
    # ["f", "i", "r", "e"]); any other iterable is a list of them.
    families = [families] if isinstance(families, str) else list(families)
    dtypes = [dtypes] if isinstance(dtypes, str) else list(dtypes)
    for line in stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        kind = msg.get("type")
        if kind == "hello":
            # The seconds a reply may take (`--timeout`), which the checks the kit makes beside
            # a case's output are budgeted by [proto.hello].
            timeout = msg.get("timeout_s")
            timeout = float(timeout) if isinstance(timeout, (int, float)) and timeout > 0 else None
            _send({"type": "hello", "protocol": PROTOCOL, "name": name,
                   "families": families, "dtypes": dtypes,
                   "conventions": {"future_keys": future_keys, "placement": placement},
                   "positions": positions, **({"state": state} if state else {})})
        elif kind == "bye":
            return
        elif kind == "case":
            cid = msg.get("id", "")
            case = None
            try:
                case = Case(msg)
                if max_len is not None and case.queries and case.keys and case.length > max_len:
                    case.check_positions()  # an invalid position is still rejected
                    raise Skip(f"positions up to {case.length - 1} reach past the module's context "
                               f"of {max_len} (serve's max_len, CAPABILITIES['max_len']"
                               + (f"; a square glue stops at {SQUARE_LIMIT} unless it says otherwise"
                                  if max_len == SQUARE_LIMIT and positions == "square" else "") + ")")
                out = build(case)
                if not isinstance(out, dict):
                    if len(case.outputs) != 1:
                        raise TypeError("build must return a dict when several outputs are requested")
                    out = {case.outputs[0]: out}
                if case.kind in long_unchecked and case.encoding.get("type") == "fire" \
                        and case.family != "invalid" and case.dtype != "bf16":
                    from fire_conformance.long_length import check_kit
                    long_unchecked.discard(case.kind)  # a mistake found fails this case alone
                    if not check_kit(build, case, max_len, timeout):
                        long_unchecked.add(case.kind)
                outputs = {}
                for key, value in out.items():
                    try:
                        shape, data = _flatten(value)
                    except (TypeError, ValueError) as e:
                        hint = " (did build forget to return it?)" if value is None else ""
                        raise TypeError(f"build(case) returned output `{key}` as "
                                        f"{_described(value)}{hint}: {e}; return one array of numbers "
                                        "per output (a torch tensor, a NumPy array, a nested list)") from None
                    outputs[key] = {"shape": shape, "data": data}
                _reply(case, {"type": "result", "id": cid, "status": "output", "outputs": outputs})
            except UnsupportedDtype as s:
                _reply(case, {"type": "result", "id": cid, "status": "skipped", "reason": str(s),
                              "unsupported": "dtype"})
            except Skip as s:
                _reply(case, {"type": "result", "id": cid, "status": "skipped", "reason": str(s)})
            except Mistake as e:
                _reply(case, {"type": "result", "id": cid, "status": "errored",
                              "message": _message(e), "cause": "module"})
            except MemoryError as e:
                # The machine's limit, not a FIRE mistake: counted as skipped, and what the case
                # checks is reported unchecked [proto.report].
                _reply(case, {"type": "result", "id": cid, "status": "skipped",
                              "reason": f"ran out of memory ({_message(e)})"})
            except Exception as e:  # noqa: BLE001 - every failure is a reply, never a crash
                if _out_of_memory(e):
                    _reply(case, {"type": "result", "id": cid, "status": "skipped",
                                  "reason": f"ran out of memory ({_message(e)})"})
                    continue
                _reply(case, {"type": "result", "id": cid, "status": "errored",
                              "message": _message(e)})
