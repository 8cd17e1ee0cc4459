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

``Repeats`` remembers a digest of every tensor the module returned in this process, with the
case it was returned for and digests of that case's f_θ and of all its parameters. Two rules
use it:

* a case the glue's own checks fail (a probe call answering otherwise than the graded call, an
  output of the wrong shape) is told the repeat instead, where one of its calls returned the
  tensor of an earlier case with other parameters: that is the cause, and the check's own words
  would name another;
* a case whose calls repeated the tensor of an earlier case with another f_θ (a module ignoring
  a scalar repeats itself across cases differing in it alone: the catalogue names that), and
  whose checks passed, is failed only where its bias also differs clearly from this case's
  (the independent NumPy FIRE of ``numpy_fire``, on the causal entries, by more than
  ``CLEARLY`` of its scale): repeated values that are right for this case are not a mistake.
  The same holds for a tensor kept from the case's training step (``stale``, ``steps``).

Outputs of more than ``LIMIT`` values are not remembered (hashing a 4 096-square of twelve
heads in every call would cost more than the case).
"""

import hashlib

import numpy as np

from fire_conformance import kit as fire_kit

# The largest output remembered, in values.
LIMIT = 1 << 24
# How far, relative to the bias's largest magnitude, a repeated output must be from the case's
# own bias to be called carried: far beyond any rounding, bfloat16's included (a bias of
# another f_θ is off by the order of the bias itself).
CLEARLY = 0.1


def digest(t):
    """A digest of a tensor's dtype, shape and bytes; ``None`` for what is not a torch tensor
    or NumPy array, an output over ``LIMIT`` values, or one whose values are all equal (a
    module returning zeros everywhere repeats itself without carrying anything)."""
    try:
        import torch
    except ImportError:  # NumPy modules only
        torch = None
    if torch is not None and isinstance(t, torch.Tensor):
        if t.numel() > LIMIT or t.numel() < 2:
            return None
        flat = t.detach().cpu().contiguous().reshape(-1)
        if bool((flat == flat[0]).all()):
            return None
        raw, shape, dtype = flat.view(torch.uint8).numpy().tobytes(), tuple(t.shape), str(t.dtype)
    elif isinstance(t, np.ndarray):
        if t.size > LIMIT or t.size < 2 or bool(np.all(t == t.flat[0])):
            return None
        raw, shape, dtype = np.ascontiguousarray(t).tobytes(), t.shape, str(t.dtype)
    else:
        return None
    h = hashlib.blake2b(digest_size=16)
    h.update(repr((shape, dtype)).encode())
    h.update(raw)
    return h.hexdigest()


def params_digest(params, only="mlp", extra=()):
    """A digest of a case's parameters whose names (the glue's) start with ``only`` (f_θ's by
    default, every one with ``only=""``) and of ``extra`` (the encoding's other settings)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(repr(extra).encode())
    for k in sorted(k for k in params if k.startswith(only)):
        h.update(k.encode())
        h.update(np.ascontiguousarray(np.asarray(params[k], dtype=np.float64)).tobytes())
    return h.hexdigest()


class Repeats:
    def __init__(self):
        # digest -> (case id, (f_θ digest, all parameters' digest), None in its training step)
        # of the first case that returned it.
        self.earlier = {}
        # This case's: its id, f_θ digest, what its calls returned before the graded phase (the
        # training step's, from parameters changed in place: never "earlier" for another case's
        # f_θ) and since, and whether the step changed a parameter.
        self.case, self.mlp, self.before, self.now, self.changed = None, None, [], [], False

    def start(self, case_id, params, settings=()):
        """Begins a case, before its module's first call (``settings``: what else of the
        encoding than ``params`` the bias depends on, ε say): what the calls of the case before
        returned becomes "earlier" — of its graded phase with its f_θ, of its training step with
        none (parameters changed in place, which no case's output may repeat either)."""
        for d in self.before:
            self.earlier.setdefault(d, (self.case, None))
        for d in self.now:
            self.earlier.setdefault(d, (self.case, self.mlp))
        self.case, self.before, self.now, self.changed = case_id, [], [], False
        self.mlp = (params_digest(params), params_digest(params, only="", extra=settings))

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

    def repeated(self, output=None, of="mlp"):
        """The id of an earlier case that got exactly ``output`` (by default any of this case's
        calls of the graded phase), in its training step or with other parameters: another
        f_θ (``of="mlp"``), or any other parameter (``of="any"``: where a check of the glue
        already failed, a module ignoring that parameter would not have failed it); ``None``
        where there is none."""
        digests = [digest(output)] if output is not None else self.now
        at = 0 if of == "mlp" else 1
        for d in digests:
            seen = self.earlier.get(d) if d is not None else None
            if seen is not None and (seen[1] is None or seen[1][at] != self.mlp[at]):
                return seen[0]
        return None


class StaleBias(fire_kit.Mistake):
    """The module's bias did not follow a change of its parameters."""


class CarriedBias(fire_kit.Mistake):
    """The module returned a tensor it had returned for an earlier case."""


def stale():
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


def carried(earlier, where):
    """The glue's finding for a case whose call returned what the earlier case ``earlier`` got."""
    return CarriedBias(
        f"{where} exactly the tensor the module returned for the earlier case `{earlier}`, whose "
        "f_θ differs: its output does not follow the parameters it is given but is carried from "
        "one call to the next — most often a bias cached under the length or shape alone and kept "
        "where a new module does not reset it (a module-level dict, a class attribute every "
        "instance shares, functools.lru_cache on a function of the length); in a model every "
        "layer, and every step after the first, would get the first bias computed. Keep the cache "
        "on the instance and key it on everything the bias depends on, or recompute it [fire.bias]")


def clearly_differs(got, want, queries, keys):
    """Whether the bias ``got`` differs from ``want`` (both ``[H, len(queries), len(keys)]``) by
    more than ``CLEARLY`` of ``want``'s largest magnitude on some causal entry (key at or before
    its query: the entries every convention for later keys agrees on [conv.future]), or in its
    pattern of non-finite values there."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return True
    causal = np.broadcast_to(np.asarray(keys)[None, :] <= np.asarray(queries)[:, None], want.shape)
    got, want = got[causal], want[causal]
    finite = np.isfinite(want)
    if not np.array_equal(np.isfinite(got), finite):
        return True
    scale = float(np.max(np.abs(want[finite]), initial=0.0))
    return bool(np.any(np.abs(got[finite] - want[finite]) > CLEARLY * scale))
