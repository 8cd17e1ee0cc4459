"""A Haiku FIRE served through Flax linen's interface, the one the JAX glue reads.

A ``hk.Module`` is built and called inside a function that ``hk.transform_with_state`` makes pure:
``init(rng, *args) -> (params, state)`` and ``apply(params, state, rng, *args) -> (out,
state)``. Its parameters are what ``hk.get_parameter`` made, keyed by module path
(``fire/~/linear_0``) and name; an optimiser (optax over ``params``) trains every one of them
and nothing in ``state`` (``hk.get_state``), which a training loop carries from one step to the
next (``out, state = apply(params, state, …)``). ``as_linen(cls)`` is a class constructed as the
Haiku one is whose instances have ``init(rng, *args) -> variables`` and ``apply(variables,
*args)``:

- the variables: ``params`` Haiku's, each module path split at ``/`` into the tree, so that
  ``fire/~/linear_0/w`` is a path as ``--map`` writes one (an ``hk.Linear``'s ``w`` is ``[in,
  out]``, as Flax's ``kernel``, its bias ``b``); ``state`` Haiku's state, which never trains: a
  ``c`` kept there fails the gradient cases (``jax_glue.FrozenScalar``).
- ``apply`` builds the module again inside the transformed function and calls it as a program
  evaluates a Haiku model: with the state its previous call returned (the values ``apply`` is
  given in ``state`` where they differ from what ``init`` made, as a program loads a
  checkpoint), so that a bias or a running value kept in state shows at the glue's step
  (``steps.jax_step``); with ``is_training=False`` where ``__call__`` takes it; and with a fixed
  random key, which a module drawing one for a dropout it applies at rate 0 needs. Under a JAX
  transformation (``jax.vjp``) the state it returns is not kept. A Haiku module lives for one
  call; what a program keeps between calls outside it (a module-level cache) the glue's step
  shows too.
"""

import functools
import inspect

from fire_conformance import construction
from fire_conformance import trees
from fire_conformance import train_mode
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


# The name of a ``__call__`` argument that says whether the module trains (Haiku's convention),
# given False as a program evaluating it gives it.
TRAINING = ("is_training", "training")


def training_argument(cls):
    """The name of ``cls.__call__``'s argument saying whether it trains, or None."""
    try:
        names = inspect.signature(cls.__call__).parameters
    except (TypeError, ValueError):
        return None
    return next((n for n in TRAINING if n in names), None)


def signature_of(cls):
    """A callable standing for ``cls``'s modules where the glue reads how to call one
    (``jax_calls.parameter_names``): its ``forward`` is ``cls.__call__`` less ``self`` and the
    training argument the bridge gives, as a built module's would be (a Haiku module cannot be
    built outside a transformed function)."""

    def call(*args):
        raise TypeError("stands for the signature of a Haiku module's __call__; never called")

    training = training_argument(cls)
    call.forward = functools.partial(cls.__call__, None, **({training: False} if training else {}))
    return call


def is_traced(tree, jax):
    """Whether any leaf of ``tree`` is a JAX tracer (the call is under a transformation)."""
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(tree))


def as_linen(cls):
    """``cls``, a Haiku module class, behind Flax linen's ``init``/``apply`` (module docstring).
    Constructing the bridge builds the module once in a transformed function, so that a
    constructor refusing its arguments raises there, as any module's does; ``call_target``
    carries the signature of its ``__call__``, which says how the glue calls it."""
    import haiku as hk
    import jax

    # The parameter paths each shape of module (its constructor's arguments but the initial
    # values) made the first time (`Bridged.init`).
    made_params = {}
    training = training_argument(cls)

    class Bridged:
        # How a scalar the glue finds outside `params` is made to train (`jax_glue.FrozenScalar`).
        trains_as = "declare it with hk.get_parameter"
        # Whose constructor's arguments the glue names (`construction.signature_of`).
        constructs = cls
        call_target = signature_of(cls)
        # The keyword ``apply`` takes to call the module as training does
        # (``jax_glue.JaxGlue.train_mode_agrees``), or None where its ``__call__`` takes none.
        training_flag = (training, True) if training else None

        def __init__(self, **kwargs):
            def construct():
                cls(**kwargs)

            hk.transform(construct).init(jax.random.PRNGKey(0))
            flags = {training: False} if training else {}
            self.transformed = hk.transform_with_state(lambda *args: cls(**kwargs)(*args, **flags))
            # The same, training (``apply(..., is_training=True)``).
            self.training = hk.transform_with_state(
                lambda *args: cls(**kwargs)(*args, **{training: True})) if training else None
            self.shape = tuple(sorted((k, repr(v)) for k, v in kwargs.items()
                                      if k not in construction.INITIAL_ARGS))
            self.made = ({}, {})
            self.state = {}
            self.calls = 0

        def init(self, rng, *args, **flags):
            """Haiku's params and state as linen's variables tree. A module that made parameters
            once and, initialised again with the same shape, makes fewer has returned before
            reaching them: a result kept from an earlier call (``StaleBias``), which the glue
            would otherwise report as a module without its layers."""
            del flags  # its training argument is the bridge's to give (``training_flag``)
            self.made = self.transformed.init(rng, *args)
            params, state = self.made
            self.state = state
            paths = {(module, name) for module, leaves in params.items() for name in leaves}
            first = made_params.setdefault(self.shape, paths)
            if paths < first:
                missing = sorted("/".join(p) for p in first - paths)
                raise StaleBias(
                    f"initialised again, the module made no parameter {missing} where its first "
                    "call made them: its __call__ returned before reaching hk.get_parameter, a "
                    "result kept between calls outside the module (a Haiku module lives for one "
                    "call: a module-level cache), so every layer and every step after the first "
                    "would read the first bias; recompute it from the parameters [fire.bias]")
            return trees.unflatten({**as_variables("params", params), **as_variables("state", state)})

        def apply(self, variables, *args, **flags):
            """The module called on ``args`` holding ``variables``' params, with the state its
            last concrete call returned (module docstring); given its training argument as
            ``training_flag`` says (``flags``), as training calls it, which leaves that state
            as it was."""
            if flags:
                if self.training is None or flags != {training: True}:
                    raise TypeError(f"the bridge calls a Haiku module with {self.training_flag} only, not {flags}")
                params = self.made[0]
                # A key of its own per call, as training's steps have, and `hk.dropout` off
                # (`train_mode.haiku_dropouts_off`): randomness of the module's own shows as a
                # bias that changes from call to call.
                self.calls += 1
                with train_mode.haiku_dropouts_off():
                    out, _ = self.training.apply(as_haiku(variables, "params", params), self.state,
                                                 jax.random.PRNGKey(self.calls), *args)
                return out
            params, made = self.made
            state = {module: {name: leaf if leaf is not made[module][name] else self.state[module][name]
                              for name, leaf in leaves.items()}
                     for module, leaves in as_haiku(variables, "state", made).items()}
            params = as_haiku(variables, "params", params)
            out, state = self.transformed.apply(params, state, jax.random.PRNGKey(0), *args)
            if not is_traced((params, state, out), jax):
                self.state = state
            return out

    Bridged.__name__ = Bridged.__qualname__ = getattr(cls, "__name__", "Bridged")
    return Bridged
