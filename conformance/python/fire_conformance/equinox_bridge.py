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
"""

import copy
import dataclasses
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
    (``construction.with_seed``), in inference mode (``eqx.nn.inference_mode``: an
    ``eqx.nn.Dropout`` off), as a model is when its bias is read."""
    import equinox as eqx

    module = construction.with_seed(cls, kwargs, "key", lambda: jax.random.PRNGKey(0))
    inference = getattr(eqx.nn, "inference_mode", None)
    return module if inference is None else inference(module, True)


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

        def init(self, rng, *args):
            """The module's leaves as linen's variables tree."""
            del rng, args  # built in __init__, from key
            flat = {where: leaf for where, leaf in zip(self.where, self.leaves) if where is not None}
            flat.update({("static", name): value for name, value in self.static.items()})
            return trees.unflatten(flat)

        def apply(self, variables, *args):
            given = [None if where is None else trees.lookup(variables, where) for where in self.where]
            leaves = [leaf if g is None else g for g, leaf in zip(given, self.leaves)]
            module = jax.tree_util.tree_unflatten(self.treedef, leaves)
            static = {name: trees.lookup(variables, ("static", name)) for name in self.static}
            return with_static(module, {k: v for k, v in static.items() if v is not None})(*args)

    Bridged.__name__ = Bridged.__qualname__ = getattr(cls, "__name__", "Bridged")
    return Bridged
