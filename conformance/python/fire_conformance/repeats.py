"""Outputs carried from one case to the next.

FIRE's bias is a function of the parameters and the positions of the call [fire.bias]. A module
that hands back, for one case, exactly a tensor it returned for an earlier case with another
f_θ computes from neither case's parameters: most often a bias cached under a key that leaves
the parameters out (the length, the shape) and kept where a newly built module does not reset
it: a module-level dict, a class attribute every instance shares (``_cache = {}`` in the class
body, then ``self._cache[T] = bias``), ``functools.lru_cache`` on a function of the length. In
a model every layer would get the first layer's bias, and every step after the first the first
step's. The ready-made glues build a new module for each case, so only such a cache reaches
across them; the per-instance cache that outlives a parameter change is ``steps``' and
``Glue.stale``'s.

``Repeats`` remembers a digest of every tensor a torch module returned in this process (a
forward hook; a NumPy module's outputs are left to the harness's ``carried_from``), with the
case it was returned for (its f_θ, its encoding) and whether in the training step the glue ran
on it (``steps.step``: parameters changed in place, which no case holds). Two rules use it:

* a case the glue's own checks fail (a probe call answering otherwise than the graded call, an
  output of the wrong shape) is told the repeat instead, where one of its calls returned the
  tensor of a training step or of an earlier case whose bias at this case's positions clearly
  differs from this one's (the independent NumPy FIRE of ``numpy_fire``): that is the cause,
  and the check's own words would name another;
* a case whose calls repeated the tensor of a training step or of an earlier case with another
  f_θ (a module ignoring a scalar repeats itself across cases differing in it alone: the
  catalogue names that), and whose checks passed, is failed only where its bias also differs
  clearly from this case's (on the causal entries, by more than ``CLEARLY`` of its scale):
  repeated values that are right for this case are not a mistake. The same holds for a tensor
  kept from the case's own training step (``stale``).

Outputs of more than ``LIMIT`` values are not remembered (hashing a 4 096-square of twelve
heads in every call would cost more than the case).
"""

import hashlib

import numpy as np

from fire_conformance import kit as fire_kit

try:
    import torch
except ImportError:  # NumPy and JAX glues
    torch = None

# The largest output remembered, in values.
LIMIT = 1 << 24
# How far, relative to the bias's largest magnitude, a repeated output must be from the case's
# own bias to be called carried: far beyond any rounding, bfloat16's included (a bias of
# another f_θ is off by the order of the bias itself).
CLEARLY = 0.1


def digest(t):
    """A digest of a tensor's dtype, shape and bytes; ``None`` for what is not a torch tensor
    or NumPy array, an output over ``LIMIT`` values, one whose values are all equal or none of
    them a finite value above −1e3 (a module returning zeros, or NaN, everywhere repeats itself
    without carrying anything; so does a masked one whose every other entry is NaN, an invalid
    case's)."""
    if torch is not None and isinstance(t, torch.Tensor):
        if t.numel() > LIMIT or t.numel() < 2:
            return None
        flat = t.detach().cpu().contiguous().reshape(-1)
        if bool((flat == flat[0]).all()) or not bool((flat.isfinite() & (flat > -1e3)).any()):
            return None
        raw, shape, dtype = flat.view(torch.uint8).numpy(), tuple(t.shape), str(t.dtype)
    elif isinstance(t, np.ndarray):
        if t.size > LIMIT or t.size < 2 or bool(np.all(t == t.flat[0])) \
                or not bool((np.isfinite(t) & (t > -1e3)).any()):
            return None
        raw, shape, dtype = np.ascontiguousarray(t).view(np.uint8), t.shape, str(t.dtype)
    else:
        return None
    h = hashlib.blake2b(digest_size=16)
    h.update(repr((shape, dtype)).encode())
    h.update(raw)
    return h.hexdigest()


def mlp_digest(params):
    """A digest of a case's f_θ: its parameters named ``mlp…`` (the glue's names)."""
    h = hashlib.blake2b(digest_size=16)
    for k in sorted(k for k in params if k.startswith("mlp")):
        h.update(k.encode())
        h.update(np.ascontiguousarray(np.asarray(params[k], dtype=np.float64)).tobytes())
    return h.hexdigest()


class Seen:
    """Where a tensor was first returned: the case's id, its f_θ digest and encoding, and whether
    in the training step the glue ran on it (``step``: its parameters changed in place)."""

    def __init__(self, case, mlp, encoding, step):
        self.case, self.mlp, self.encoding, self.step = case, mlp, encoding, step


class Repeats:
    def __init__(self):
        # digest -> ``Seen``, of the first case that returned it.
        self.earlier = {}
        # This case's: its id, f_θ digest and encoding, what its calls returned in the training
        # step and since, and whether the step changed a parameter.
        self.case, self.mlp, self.encoding = None, None, None
        self.before, self.now, self.changed = [], [], False

    def start(self, case_id, params, encoding):
        """Begins a case, before its module's first call: what the calls of the case before
        returned becomes "earlier"."""
        for d in self.before:
            self.earlier.setdefault(d, Seen(self.case, self.mlp, self.encoding, True))
        for d in self.now:
            self.earlier.setdefault(d, Seen(self.case, self.mlp, self.encoding, False))
        self.case, self.mlp, self.encoding = case_id, mlp_digest(params), encoding
        self.before, self.now, self.changed = [], [], False

    def loaded(self, changed):
        """The graded phase begins: the case's values are back in the module after the training
        step (``changed``: the step changed a parameter)."""
        self.before, self.now, self.changed = self.now, [], changed

    def note(self, output):
        """Records what one call of the module returned (a forward hook's output)."""
        d = digest(output)
        if d is not None:
            self.now.append(d)

    def hook(self, module, args, output):
        """A torch forward hook: every call's output, the probes' included."""
        self.note(output)

    def stale(self):
        """Whether a call of the graded phase returned exactly a tensor a call of the training
        step returned, though the step changed the parameters (a probe answering with the bias
        kept from the step, say)."""
        return self.changed and any(d in self.before for d in self.now)

    def repeated(self, queries=None, keys=None):
        """The earlier ``Seen`` whose tensor a call of this case's graded phase returned exactly:
        one of a training step (parameters changed in place, which no case holds), or of a
        case with another f_θ (by default), or — given this case's ``queries`` and ``keys`` —
        of any case whose bias there clearly differs from this one's by the NumPy FIRE (two
        cases differing in the sign of c alone have one bias, and a module ignoring a scalar
        repeats itself across cases differing in it: only the f_θ rule may call those carried
        where no check has failed). ``None`` where there is none."""
        for d in self.now:
            seen = self.earlier.get(d)
            if seen is None:
                continue
            if queries is None:
                other = seen.mlp != self.mlp
            else:
                other = differs(seen.encoding, self.encoding, queries, keys)
            # Another case's step tensor this case's own step did not return (with the same
            # values it would have): carried; one it did return is this case's own stale tensor
            # unless the two cases' biases differ (a cache shared by every instance).
            if (seen.step and d not in self.before) or other:
                return seen
        return None


def differs(a, b, queries, keys):
    """Whether the FIRE encodings ``a`` and ``b`` give clearly different biases at these
    positions (``clearly_differs``; False where either is not FIRE's or is invalid)."""
    from fire_conformance import numpy_fire

    class At:  # the positions of this case with another's encoding
        def __init__(self, encoding):
            self.encoding, self.queries, self.keys = encoding, queries, keys

    x, y = numpy_fire.reference(At(a)), numpy_fire.reference(At(b))
    return x is not None and y is not None and clearly_differs(x, y, queries, keys)


class StaleBias(fire_kit.Mistake):
    """The module's bias did not follow a change of its parameters."""


class CarriedBias(fire_kit.Mistake):
    """The module returned a tensor it had returned for an earlier case."""


def stale_bias():
    """The glue's finding for a module that kept the bias of the training step the glue ran
    before the graded call (``Repeats.stale``, ``Glue.stale``; ``steps.step``)."""
    return StaleBias(
        "the module returned exactly the bias of its training step (the call the glue makes "
        "before the graded one, with the parameters changed in place as an optimiser changes "
        "them, then the case's values written back in place): it keeps a bias computed once (a "
        "cache keyed on the length, functools.lru_cache, a tensor stored at the first call, a "
        "cache cleared only by load_state_dict) and does not recompute it when its parameters "
        "change, so in training every step after the first would use a stale bias; recompute it "
        "on every call, or key a cache on the parameters' versions as well [fire.bias]")


def carried(seen, where):
    """The glue's finding for a case whose call returned what the earlier ``Seen`` got."""
    whose = ("in the training step the glue ran on it, with its parameters changed in place"
             if seen.step else "whose parameters and bias differ")
    return CarriedBias(
        f"{where} exactly the tensor the module returned for the earlier case `{seen.case}`, {whose}: "
        "its output does not follow the parameters it is given but is carried from one call to the "
        "next — most often a bias cached under the length or shape alone and kept where a new "
        "module does not reset it (a module-level dict, a class attribute every instance shares, "
        "functools.lru_cache on a function of the length); in a model every layer, and every step "
        "after the first, would get the first bias computed. Keep the cache on the instance and key "
        "it on everything the bias depends on, or recompute it [fire.bias]")


def causal(a, queries, keys):
    """The entries of a bias ``[.., len(queries), len(keys)]`` whose key is at or before its
    query: the ones every convention for later keys agrees on [conv.future]."""
    return a[np.broadcast_to(np.asarray(keys)[None, :] <= np.asarray(queries)[:, None], a.shape)]


def distance(a, b, queries, keys):
    """The largest difference between two biases on their causal entries (``causal``), ∞ where
    their shapes, or their patterns of non-finite values there, differ."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return np.inf
    a, b = causal(a, queries, keys), causal(b, queries, keys)
    finite = np.isfinite(b)
    if not np.array_equal(np.isfinite(a), finite):
        return np.inf
    return float(np.max(np.abs(a[finite] - b[finite]), initial=0.0))


def clearly_differs(got, want, queries, keys):
    """Whether the bias ``got`` differs from ``want`` (both ``[H, len(queries), len(keys)]``) by
    more than ``CLEARLY`` of ``want``'s largest magnitude on some causal entry, or in its
    pattern of non-finite values there (``distance``)."""
    want = np.asarray(want, dtype=np.float64)
    kept = causal(want, queries, keys)
    scale = float(np.max(np.abs(kept[np.isfinite(kept)]), initial=0.0))
    return distance(got, want, queries, keys) > CLEARLY * scale
