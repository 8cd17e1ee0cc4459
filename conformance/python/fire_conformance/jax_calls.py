"""How the JAX glue calls a module: through linen's ``init`` and ``apply`` (a ``flax.nnx``,
Equinox or Haiku module behind its bridge, which presents them), given evaluation's value of
each training flag its call takes, and how the names of its call's parameters say what to pass
(``calls.call_style``). Shared by ``jax_glue`` and the checks it makes (``long_length``)."""

from fire_conformance import calls
from fire_conformance import equinox_bridge
from fire_conformance import haiku_bridge
from fire_conformance import nnx_bridge
from fire_conformance import train_mode


def import_jax():
    try:
        import jax
        import jax.numpy as jnp
    except ImportError as e:
        raise SystemExit(f"the JAX glue needs jax ({e}); install it with `pip install jax`")
    return jax, jnp


def parameter_names(m):
    """The positional parameter names of ``__call__`` (Flax; an NNX module's behind
    ``nnx_bridge``) or else of ``apply`` less its ``variables`` (a plain-JAX class with linen's
    interface)."""
    m = getattr(m, "call_target", m)
    if callable(m):
        return calls.parameter_names(m)
    return calls.positional(m.apply, 1) or []


def call_of(m):
    """The callable whose signature says how ``m`` is called: ``__call__`` (Flax; the module
    behind a bridge, ``call_target``), or else ``apply`` (a plain-JAX class)."""
    target = getattr(m, "call_target", m)
    return target if callable(target) else m.apply


def apply(m, variables, *args, **kwargs):
    """``m.apply`` given evaluation's value of each training flag its call requires or leaves to
    ``None`` (``train_mode.eval_flags``: a required ``train``, linen's ``nn.merge_param``), as a
    program reading its bias passes it; ``kwargs`` (training's value) take precedence."""
    return m.apply(variables, *args, **{**train_mode.eval_flags(call_of(m), m), **kwargs})


def init(m, rng, *args):
    """``m.init`` given evaluation's training flags as ``apply`` gives them."""
    return m.init(rng, *args, **train_mode.eval_flags(call_of(m), m))


def call_style(m):
    """As ``calls.call_style``, from ``__call__`` (Flax) or else ``apply`` less ``variables``."""
    return calls.style_of(parameter_names(m))


def bridged(cls):
    """``cls`` behind linen's interface: a ``flax.nnx``, Equinox or Haiku module through its
    bridge, any other as it is."""
    for bridge, test in ((nnx_bridge, nnx_bridge.is_nnx), (equinox_bridge, equinox_bridge.is_equinox),
                         (haiku_bridge, haiku_bridge.is_haiku)):
        if test(cls):
            return bridge.as_linen(cls)
    return cls


def linen_interface(cls):
    """Refuses, before any case, a class without Flax linen's ``init``/``apply`` (a
    ``flax.nnx``, Equinox or Haiku module has come through its bridge by then), naming what to do
    rather than an ``AttributeError`` on every case."""
    if callable(getattr(cls, "init", None)) and callable(getattr(cls, "apply", None)):
        return
    raise SystemExit(
        f"{getattr(cls, '__name__', cls)}: no init/apply methods; the JAX glue takes Flax "
        "linen's interface (init(rng, *args) -> variables, apply(variables, *args)), flax.nnx, "
        "Equinox and Haiku modules; write a build(case) glue for any other (conformance/README.md)")
