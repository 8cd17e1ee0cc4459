"""An Equinox FIRE served through Flax linen's interface, the one the JAX glue reads.

An ``eqx.Module`` is an immutable pytree whose fields are its parameters, built with a ``key``
and called directly; Equinox trains every floating array in it (``eqx.filter_grad``,
``eqx.is_inexact_array``) and nothing else. ``as_linen(cls)`` is a class constructed as the
Equinox one is (``key=jax.random.PRNGKey(0)`` added where its constructor takes ``key``) whose
instances have ``init(rng, *args) -> variables`` and ``apply(variables, *args)``:

- the variables: ``params`` the floating array leaves, keyed by field names and list indices
  (``mlp/layers/0/weight``: Equinox's ``Linear`` keeps PyTorch's ``[out, in]``, which the glue
  reads as such); ``constants`` the Python numbers among the leaves (an ``init_L`` kept as a
  float, which Equinox never trains, as Appendix E freezes it; the glue loads the case's value
  there), ``arrays`` the other arrays; ``static`` a FIRE scalar declared a static field
  (``c: float = eqx.field(static=True)``), which is no leaf, so never trained (the glue loads
  the case's value there and says so on the gradient cases). Everything else (functions, other
  static fields) stays as built.
- ``apply`` rebuilds the module with the given leaves and calls it. An Equinox module cannot
  change itself between calls; what a program keeps between them (a module-level cache) the
  glue's step shows (``steps.jax_step``).
- Inference and training: the graded call is inference's, as a model reads its bias (every
  ``inference`` field set by ``eqx.nn.inference_mode``; a ``__call__`` taking ``inference``
  given ``inference=True``; one requiring a ``key`` given a fixed one).
  ``apply(..., inference=False)`` is the call as training makes it
  (the fields unset, ``inference=False``, and a fresh ``key`` per call where ``__call__`` takes
  one), which ``train_mode`` compares with the graded one. In every call its ``eqx.nn.Dropout``s
  are at ``p = 0`` (``without_dropout``): inference's are off anyway, and training's would make
  the bias random.
"""

import copy
import dataclasses
import inspect
import itertools
import numbers

from fire_conformance import construction
from fire_conformance import trees


def is_equinox(cls):
    """Whether ``cls`` is an Equinox module class."""
    return any(getattr(k, "__module__", "").startswith("equinox.")
               for k in getattr(cls, "__mro__", ()))


def key_name(k):
    """A pytree path entry as a name in the variables tree: the field, the index or the key."""
    for attr in ("name", "idx", "key"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def collection(leaf, jnp):
    """The linen-style collection an Equinox leaf is put in, or None for one kept as built."""
    if hasattr(leaf, "dtype") and hasattr(leaf, "shape"):
        return "params" if jnp.issubdtype(leaf.dtype, jnp.inexact) else "arrays"
    if isinstance(leaf, numbers.Number) and not isinstance(leaf, bool):
        return "constants"
    return None


def static_scalars(module):
    """``{field name: value}`` of the module's static fields named as FIRE's scalars
    (``construction.SCALARS``) and holding a number: no other static field is read (a
    ``num_heads`` or an ``eps`` stays as built)."""
    try:
        fields = dataclasses.fields(module)
    except TypeError:
        return {}
    found = {f.name: getattr(module, f.name, None) for f in fields
             if f.metadata.get("static") and f.name in construction.SCALARS}
    return {name: v for name, v in found.items()
            if isinstance(v, numbers.Number) and not isinstance(v, bool)}


def with_static(module, values):
    """A copy of ``module`` whose static fields ``values`` (``{name: value}``) hold those: a
    static field is part of the module's structure, not a leaf a pytree update reaches."""
    if not values:
        return module
    module = copy.copy(module)
    for name, value in values.items():
        object.__setattr__(module, name, value)
    return module


def build(cls, jax, kwargs):
    """The Equinox module, given ``key=jax.random.PRNGKey(0)`` where its constructor may take it
    (``construction.with_seed``), in inference mode (``inference_of``: an ``eqx.nn.Dropout``
    off), as a model is when its bias is read."""
    module = construction.with_seed(cls, kwargs, "key", lambda: jax.random.PRNGKey(0))
    return inference_of(module, True, jax)


def has_inference_fields(module, jax):
    """Whether ``module`` or a module inside it has an ``inference`` attribute, the switch
    ``eqx.nn.inference_mode`` sets (``eqx.nn.Dropout``'s, or a module's own)."""
    inside = jax.tree_util.tree_leaves(module, is_leaf=lambda x: hasattr(x, "inference"))
    return any(hasattr(x, "inference") for x in inside)


def inference_of(module, value, jax):
    """``module`` with its ``inference`` fields set to ``value`` (``eqx.nn.inference_mode``);
    as built where it has none, or where Equinox cannot set them (a field left at its class
    default by a custom ``__init__`` is no leaf of the module, and ``inference_mode`` refuses
    it): the module is then called as built, as its own program would have to."""
    import equinox as eqx

    inference = getattr(eqx.nn, "inference_mode", None)
    if inference is None or not has_inference_fields(module, jax):
        return module
    try:
        return inference(module, value)
    except (TypeError, ValueError):
        return module


def without_dropout(module, jax):
    """``module`` with every ``eqx.nn.Dropout`` in it at ``p = 0``, which Equinox's dropout
    takes as inference: training's call without its one random path (``train_mode``)."""
    import equinox as eqx

    def off(node):
        if not isinstance(node, eqx.nn.Dropout):
            return node
        node = copy.copy(node)
        object.__setattr__(node, "p", 0.0)
        return node

    return jax.tree_util.tree_map(off, module, is_leaf=lambda x: isinstance(x, eqx.nn.Dropout))


def keywords(module):
    """``{name: required}`` of what ``module.__call__`` takes by keyword (``required``: no
    default)."""
    try:
        params = inspect.signature(type(module).__call__).parameters.values()
    except (TypeError, ValueError):
        return {}
    return {p.name: p.default is p.empty for p in params
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def as_linen(cls):
    """``cls``, an Equinox module class, behind Flax linen's ``init``/``apply`` (module
    docstring). Its ``call_target`` is the Equinox module, whose ``__call__`` says how the glue
    calls it."""
    import jax
    import jax.numpy as jnp

    class Bridged:
        # How a scalar the glue finds outside `params` is made to train (`jax_glue.FrozenScalar`).
        trains_as = "hold it as a floating array"
        # Whose constructor's arguments the glue names (`construction.signature_of`).
        constructs = cls

        def __init__(self, **kwargs):
            self.module = self.call_target = build(cls, jax, kwargs)
            leaves, self.treedef = jax.tree_util.tree_flatten_with_path(self.module)
            # Each leaf: its collection and path in the variables tree, or None (kept as built).
            self.where = [None if collection(leaf, jnp) is None
                          else (collection(leaf, jnp),) + tuple(key_name(k) for k in path)
                          for path, leaf in leaves]
            self.leaves = [leaf for _, leaf in leaves]
            self.static = static_scalars(self.module)
            # Inference against training (module docstring): what the calls are given.
            takes = keywords(self.module)
            self.takes_inference, self.takes_key = "inference" in takes, "key" in takes
            # A call that requires a key (a model with a dropout passes one every call) is
            # given a fixed one in the graded call, where inference mode turns the dropout off.
            self.needs_key = takes.get("key", False)
            self.switches = has_inference_fields(self.module, jax)
            trains = self.takes_inference or self.switches
            # The keyword ``apply`` takes to call the module as training does
            # (``jax_glue.JaxGlue.train_mode_agrees``), and how its message says so.
            self.training_flag = ("inference", False) if trains else None
            self.training_how = ("`inference=False`" if self.takes_inference
                                 else "eqx.nn.inference_mode(module, False)")
            self.keys = itertools.count(1)

        def init(self, rng, *args, **flags):
            """The module's leaves as linen's variables tree."""
            del rng, args, flags  # built in __init__, from key
            flat = {where: leaf for where, leaf in zip(self.where, self.leaves) if where is not None}
            flat.update({("static", name): value for name, value in self.static.items()})
            return trees.unflatten(flat)

        def apply(self, variables, *args, inference=True):
            given = [None if where is None else trees.lookup(variables, where) for where in self.where]
            leaves = [leaf if g is None else g for g, leaf in zip(given, self.leaves)]
            module = jax.tree_util.tree_unflatten(self.treedef, leaves)
            static = {name: trees.lookup(variables, ("static", name)) for name in self.static}
            module = with_static(module, {k: v for k, v in static.items() if v is not None})
            flags = {"inference": inference} if self.takes_inference else {}
            if self.needs_key:
                flags["key"] = jax.random.PRNGKey(0)
            # Its dropouts off in every call: inference's are already, and a module whose
            # `inference` field inference_mode cannot set (`inference_of`) is graded without them.
            module = without_dropout(module, jax)
            if not inference:
                module = inference_of(module, False, jax) if self.switches else module
                if self.takes_key:
                    # A key of its own per call, as training's steps have: a dropout then shows
                    # as a bias that changes from call to call (``train_mode.check_jax``).
                    flags["key"] = jax.random.PRNGKey(next(self.keys))
            return module(*args, **flags)

    Bridged.__name__ = Bridged.__qualname__ = getattr(cls, "__name__", "Bridged")
    return Bridged
