"""FIRE written with Equinox (an immutable ``eqx.Module`` pytree, built with a ``key``, called
directly, every floating array trained): Appendix E with ``eqx.nn.MLP`` (PyTorch's ``[out, in]``
weights) and an ``init_L`` kept as a Python float, and the mistakes Equinox invites: a ``c``
kept as a Python float (never trained), a ψ table made in ``__init__`` from ``init_c`` (a
floating array, so it trains as a parameter no case value reaches), positions counted from 1.
Driven by tests/wild_jax.rs through the Appendix E glue, which hands Equinox modules to
``fire_conformance.jax_glue`` (``equinox_bridge``).
"""

import equinox as eqx
import jax
import jax.numpy as jnp


class FIRE(eqx.Module):
    """Appendix E in Equinox; the subclasses change one thing each."""

    mlp: eqx.nn.MLP
    c: jax.Array
    L_multiplier: jax.Array
    init_L: float
    eps: float = eqx.field(static=True)

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6, *, key):
        self.mlp = eqx.nn.MLP(1, num_heads, mlp_width, depth=1, activation=jax.nn.relu, key=key)
        self.c = self.scalar(init_c)
        self.L_multiplier = jnp.asarray(1.0, dtype=jnp.float32)
        self.init_L = init_L
        self.eps = eps

    def scalar(self, value):
        return jnp.asarray(value, dtype=jnp.float32)

    def positions(self, seq_length):
        return jnp.arange(seq_length, dtype=jnp.float32)

    def __call__(self, x):
        positions = self.positions(x.shape[2])
        rel_distance = positions[:, None] - positions[None, :]
        threshold = jnp.abs(self.L_multiplier * self.init_L)
        pos_normalizer = jnp.maximum(positions, threshold)[:, None]
        rel_distance = jnp.log(jnp.abs(self.c * rel_distance) + 1)
        pos_normalizer = jnp.log(jnp.abs(self.c * pos_normalizer) + 1) + self.eps
        normalized = (rel_distance / pos_normalizer).reshape(-1, 1)
        seq_length = positions.shape[0]
        bias = jax.vmap(self.mlp)(normalized).reshape(seq_length, seq_length, -1)
        return jnp.transpose(bias, (2, 0, 1))[None]


class CAsFloat(FIRE):
    """``c`` kept as a Python float: right on values, but ``eqx.filter_grad`` never trains it."""

    def scalar(self, value):
        return float(value)


class OneBasedPositions(FIRE):
    """Positions counted from 1 (the catalogue's `one-based-positions`)."""

    def positions(self, seq_length):
        return jnp.arange(1, seq_length + 1, dtype=jnp.float32)
