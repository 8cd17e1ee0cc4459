"""Appendix E's FIRE as a ``flax.nnx`` module: what a Flax user's FIRE looks like since NNX
became Flax's API. Parameters are ``nnx.Param`` attributes (``init_L`` a plain ``nnx.Variable``,
which NNX's optimiser over ``nnx.Param`` leaves alone, as Appendix E freezes it), the MLP two
``nnx.Linear`` layers; the module takes ``rngs`` when built and is called directly.

    fire-conformance run --impl "fire-conformance-jax nnx_fire.py:FIRE"
    pytest --fire-impl nnx_fire.py:FIRE
"""

import jax.numpy as jnp
from flax import nnx


class FIRE(nnx.Module):
    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6, *,
                 rngs: nnx.Rngs):
        self.hidden = nnx.Linear(1, mlp_width, rngs=rngs)
        self.out = nnx.Linear(mlp_width, num_heads, rngs=rngs)
        self.c = nnx.Param(jnp.asarray(init_c, dtype=jnp.float32))
        self.L_multiplier = nnx.Param(jnp.asarray(1.0, dtype=jnp.float32))
        self.init_L = nnx.Variable(jnp.asarray(init_L, dtype=jnp.float32))
        self.eps = eps

    def __call__(self, x):
        c = self.c[...]
        seq_length = x.shape[2]
        positions = jnp.arange(seq_length, dtype=x.dtype)
        rel_distance = positions[:, None] - positions[None, :]
        threshold = jnp.abs(self.L_multiplier[...] * self.init_L[...])
        pos_normalizer = jnp.maximum(positions, threshold)[:, None]
        rel_distance = jnp.log(jnp.abs(c * rel_distance) + 1)
        pos_normalizer = jnp.log(jnp.abs(c * pos_normalizer) + 1) + self.eps
        normalized = (rel_distance / pos_normalizer)[..., None]
        bias = self.out(nnx.relu(self.hidden(normalized)))
        return jnp.transpose(bias, (2, 0, 1))[None]
