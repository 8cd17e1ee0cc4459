"""A Haiku FIRE served through Flax linen's interface, the one the JAX glue reads.

A ``hk.Module`` is built and called inside a function that ``hk.transform_with_state`` makes pure:
``init(rng, *args) -> (params, state)`` and ``apply(params, state, rng, *args) -> (out,
state)``. Its parameters are what ``hk.get_parameter`` made, keyed by module path
(``fire/~/linear_0``) and name; an optimiser (optax over ``params``) trains every one of them
and nothing in ``state`` (``hk.get_state``). ``as_linen(cls)`` is a class constructed as the
Haiku one is whose instances have ``init(rng, *args) -> variables`` and ``apply(variables,
*args)``:

- the variables: ``params`` Haiku's, each module path split at ``/`` into the tree, so that
  ``fire/~/linear_0/w`` is a path as ``--map`` writes one (an ``hk.Linear``'s ``w`` is ``[in,
  out]``, as Flax's ``kernel``, its bias ``b``); ``state`` Haiku's state, which never trains: a
  ``c`` kept there fails the gradient cases (``jax_glue.FrozenScalar``).
- ``apply`` builds the module again inside the transformed function and calls it, with no random
  key, as a program evaluates a Haiku model (``apply(params, state, None, …)``). A Haiku module
  lives for one call; what a program keeps between calls is outside it (a module-level cache),
  where the glue's step shows it (``steps.jax_step``).
"""

import functools

from fire_conformance import trees
from fire_conformance.repeats import StaleBias


def is_haiku(cls):
    """Whether ``cls`` is a Haiku module class."""
    return any(getattr(k, "__module__", "").startswith("haiku.")
               for k in getattr(cls, "__mro__", ()))


def split(module_path):
    """A Haiku module path (``fire/~/linear_0``) as path entries of the variables tree."""
    return tuple(module_path.split("/"))


def as_variables(collection, tree):
    """``{(collection, *module path entries, name): leaf}`` of Haiku's ``{module: {name: leaf}}``."""
    return {(collection,) + split(module) + (name,): leaf
            for module, leaves in tree.items() for name, leaf in leaves.items()}


def as_haiku(variables, collection, like):
    """Haiku's ``{module: {name: leaf}}`` of the ``collection`` of ``variables``, shaped as
    ``like`` (what ``init`` made): a leaf ``variables`` lacks keeps ``like``'s."""
    out = {}
    for module, leaves in like.items():
        out[module] = {}
        for name, leaf in leaves.items():
            given = trees.lookup(variables, (collection,) + split(module) + (name,))
            out[module][name] = leaf if given is None else given
    return out


def signature_of(cls):
    """A callable standing for ``cls``'s modules where the glue reads how to call one
    (``jax_glue.parameter_names``): its ``forward`` is ``cls.__call__`` less ``self``, as a built
    module's would be (a Haiku module cannot be built outside a transformed function)."""

    def call(*args):
        raise TypeError("stands for the signature of a Haiku module's __call__; never called")

    call.forward = functools.partial(cls.__call__, None)
    return call


def as_linen(cls):
    """``cls``, a Haiku module class, behind Flax linen's ``init``/``apply`` (module docstring).
    Constructing the bridge builds the module once in a transformed function, so that a
    constructor refusing its arguments raises there, as any module's does; ``call_target``
    carries the signature of its ``__call__``, which says how the glue calls it."""
    import haiku as hk
    import jax

    # Whether any module of `cls` has made parameters in this process (`Bridged.init`).
    made_params = []

    class Bridged:
        # How a scalar the glue finds outside `params` is made to train (`jax_glue.FrozenScalar`).
        trains_as = "declare it with hk.get_parameter"
        call_target = signature_of(cls)

        def __init__(self, **kwargs):
            def construct():
                cls(**kwargs)

            hk.transform(construct).init(jax.random.PRNGKey(0))
            self.transformed = hk.transform_with_state(lambda *args: cls(**kwargs)(*args))
            self.made = ({}, {})

        def init(self, rng, *args):
            """Haiku's params and state as linen's variables tree. A module whose call made
            parameters once and makes none now has returned before reaching them: a result kept
            from an earlier call (``StaleBias``), which the glue would otherwise report as a
            module without layers."""
            self.made = self.transformed.init(rng, *args)
            params, state = self.made
            if params:
                made_params.append(True)
            elif made_params:
                raise StaleBias(
                    "initialised again, the module made no parameter, where its first call made "
                    "them: its __call__ returned before reaching hk.get_parameter, a result kept "
                    "between calls outside the module (a Haiku module lives for one call: a "
                    "module-level cache), so every layer and every step after the first would "
                    "read the first bias; recompute it from the parameters [fire.bias]")
            return trees.unflatten({**as_variables("params", params), **as_variables("state", state)})

        def apply(self, variables, *args):
            params, state = self.made
            out, _ = self.transformed.apply(as_haiku(variables, "params", params),
                                            as_haiku(variables, "state", state), None, *args)
            return out

    Bridged.__name__ = Bridged.__qualname__ = getattr(cls, "__name__", "Bridged")
    return Bridged
