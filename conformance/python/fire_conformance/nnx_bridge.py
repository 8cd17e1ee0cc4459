"""A ``flax.nnx`` FIRE served through Flax linen's interface, the one the JAX glue reads.

An NNX module holds its parameters as attributes (``nnx.Param``), takes ``rngs`` when built and
is called directly; the JAX glue (``jax_glue``) reads a linen-style variables tree and applies
it. ``as_linen(cls)`` is a class constructed as the NNX one is (``rngs=nnx.Rngs(0)`` added where
its constructor takes ``rngs``, the module then put in evaluation mode) whose instances have
``init(rng, *args) -> variables`` and ``apply(variables, *args)``:

- the variables: ``params`` the ``nnx.Param`` leaves; every other ``nnx.Variable`` type a
  collection of its own, named by the type (``nnx.Variable``, ``nnx.BatchStat``, …), and JAX
  arrays held as plain attributes (``nnx.data``) the collection ``arrays``. An optimiser built as
  NNX's is (``nnx.Optimizer(model, tx, wrt=nnx.Param)``) trains ``params`` alone, so a ``c``
  kept elsewhere never trains, and the glue says so (``jax_glue.FrozenScalar``).
- ``apply`` on concrete values writes the values it is given into the one module built (those
  that differ from what it holds: what ``init`` returned, or a call wrote; ``nnx.update``) and
  calls it, as a program calls its module step after step: whatever the module keeps between
  calls (a bias or ψ table cached in an attribute) is there at the next call, as it is in
  training, where the glue's step shows it (``steps.jax_step``). Under a JAX transformation
  (``jax.vjp``) it merges a module from the one built, its state with the given values in,
  every leaf a Variable of that trace (which the call may write, an ``nnx.Cache`` say), and
  calls that, as ``nnx.grad`` does.
"""

from fire_conformance import construction
from fire_conformance import trees
from fire_conformance import train_mode

# The collection of JAX arrays an NNX module holds as plain attributes (not in a Variable).
ARRAYS = "arrays"


def _nnx():
    import jax
    from flax import nnx

    return jax, nnx


def is_nnx(cls):
    """Whether ``cls`` is a ``flax.nnx`` module class."""
    return any(getattr(k, "__module__", "").startswith("flax.nnx")
               for k in getattr(cls, "__mro__", ()))


def variable_type(leaf, nnx):
    """The ``nnx.Variable`` class of an NNX state leaf: the Variable's own, or the one a
    ``VariableState`` names (the leaves of Flax before 0.11); None for a plain array."""
    if isinstance(leaf, nnx.Variable):
        return type(leaf)
    kind = getattr(leaf, "type", None)
    if isinstance(kind, type) and issubclass(kind, nnx.Variable) and hasattr(leaf, "value"):
        return kind
    return None


def collection(leaf, nnx):
    """The linen-style collection an NNX state leaf is put in (module docstring)."""
    kind = variable_type(leaf, nnx)
    if kind is None:
        return ARRAYS
    return "params" if issubclass(kind, nnx.Param) else f"nnx.{kind.__name__}"


def value_of(leaf, nnx):
    """The array an NNX state leaf holds (a Variable's value, or the plain array itself); a
    Python number held (``nnx.Param(1.0)``, which trains as an array would) as a JAX array."""
    if variable_type(leaf, nnx) is not None:
        leaf = leaf.get_value() if hasattr(leaf, "get_value") else leaf.value
    if isinstance(leaf, (int, float)) and not isinstance(leaf, bool):
        import jax.numpy as jnp

        return jnp.asarray(leaf)
    return leaf


def holding(leaf, value, nnx):
    """``leaf`` holding ``value`` instead: a Variable (or VariableState) of the same type, or
    the plain value."""
    return leaf.replace(value=value) if variable_type(leaf, nnx) is not None else value


def build(cls, nnx, kwargs):
    """The NNX module, given ``rngs=nnx.Rngs(0)`` where its constructor may take it
    (``construction.with_seed``), in evaluation mode (``module.eval()``: an ``nnx.Dropout`` off,
    an ``nnx.BatchNorm`` on its running averages), as a model is when its bias is read, and as
    the torch glue puts a torch module."""
    module = construction.with_seed(cls, kwargs, "rngs", lambda: nnx.Rngs(0))
    if callable(getattr(module, "eval", None)):
        module.eval()
    return module


def as_linen(cls):
    """``cls``, a ``flax.nnx`` module class, behind Flax linen's ``init``/``apply`` (module
    docstring). The class built is constructed with the NNX class's own arguments; its
    ``call_target`` is the NNX module, whose ``__call__`` says how the glue calls it."""
    jax, nnx = _nnx()

    class Bridged:
        # How a scalar the glue finds outside `params` is made to train (`jax_glue.FrozenScalar`).
        trains_as = "declare it as nnx.Param"
        # Whose constructor's arguments the glue names (`construction.signature_of`).
        constructs = cls
        # Its state is sorted by name, not kept in the order it was made (`layers.loose_biases`).
        sorts_params = True

        def __init__(self, **kwargs):
            self.module = self.call_target = build(cls, nnx, kwargs)
            self.given = {}

        def init(self, rng, *args, **flags):
            """The module's state as linen's variables tree, keys as strings; what each leaf
            was, to tell the values ``apply`` is given apart from those it returned."""
            del rng, args, flags  # built in __init__, from rngs
            _, state = nnx.split(self.module)
            flat, self.given = {}, {}
            for path, leaf in state.flat_state():
                where = (collection(leaf, nnx),) + tuple(str(k) for k in path)
                flat[where] = value_of(leaf, nnx)
                self.given[tuple(path)] = (where, flat[where])
            return trees.unflatten(flat)

        def changed(self, variables):
            """``{NNX path: value}`` of the values in ``variables`` other than ``init`` gave."""
            out = {}
            for path, (where, was) in self.given.items():
                now = trees.lookup(variables, where)
                if now is not None and now is not was:
                    out[path] = now
            return out

        def apply(self, variables, *args, **flags):
            """The module called on ``args`` (and keyword ``flags``: a training flag,
            ``train_mode.jax_flag``) holding ``variables``: under a transformation a module
            merged from the one built with the given values in, else the one built with them
            written in (module docstring)."""
            changed = self.changed(variables)
            module = self.module
            if any(isinstance(v, jax.core.Tracer) for v in jax.tree_util.tree_leaves(changed)):
                graphdef, state = nnx.split(self.module)
                # Every leaf a Variable of this trace, the values not given too: a module that
                # writes its state when called (a cache in an `nnx.Cache`) may write these, as
                # under `nnx.grad`, where the built module's own raise TraceContextError.
                flat = [(p, holding(leaf, changed.get(tuple(p), value_of(leaf, nnx)), nnx))
                        for p, leaf in state.flat_state()]
                module = nnx.merge(graphdef, nnx.State.from_flat_path(flat))
            elif changed:
                _, state = nnx.split(self.module)
                now = {tuple(p): leaf for p, leaf in state.flat_state()}
                nnx.update(self.module, nnx.State.from_flat_path(
                    [(p, holding(now[p], v, nnx)) for p, v in changed.items() if p in now]))
                # What the module now holds: a later call given ``init``'s value of a leaf
                # written here (a table a step scaled, then the case's values again) writes it
                # back, where a leaf never written (a cache the module keeps) stays its own.
                for p, v in changed.items():
                    self.given[p] = (self.given[p][0], v)
            if not flags:
                return module(*args)
            # Training's call with its dropouts off (``train_mode.nnx_dropouts_off``).
            with train_mode.nnx_dropouts_off(module):
                return module(*args, **flags)

    Bridged.__name__ = Bridged.__qualname__ = getattr(cls, "__name__", "Bridged")
    return Bridged
