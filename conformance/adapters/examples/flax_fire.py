"""Appendix E's FIRE as a ``flax.linen`` module: what a Flax user's FIRE typically looks like.
``init_L`` is a constant (a variable outside ``params``), the MLP two ``nn.Dense`` layers.

    fire-conformance run --impl "fire-conformance-jax flax_fire.py:FIRE"
    pytest --fire-impl flax_fire.py:FIRE
"""

import flax.linen as nn
import jax.numpy as jnp


class FIRE(nn.Module):
    num_heads: int = 12
    mlp_width: int = 32
    init_c: float = 0.1
    init_L: float = 512.0
    eps: float = 1e-6

    @nn.compact
    def __call__(self, x):
        c = self.param("c", lambda _: jnp.asarray(self.init_c))
        L_multiplier = self.param("L_multiplier", lambda _: jnp.asarray(1.0))
        init_L = self.variable("constants", "init_L", lambda: jnp.asarray(self.init_L)).value
        seq_length = x.shape[2]
        positions = jnp.arange(seq_length, dtype=x.dtype)
        rel_distance = positions[:, None] - positions[None, :]
        threshold = jnp.abs(L_multiplier * init_L)
        pos_normalizer = jnp.maximum(positions, threshold)[:, None]
        rel_distance = jnp.log(jnp.abs(c * rel_distance) + 1)
        pos_normalizer = jnp.log(jnp.abs(c * pos_normalizer) + 1) + self.eps
        normalized = (rel_distance / pos_normalizer)[..., None]
        hidden = nn.relu(nn.Dense(self.mlp_width, param_dtype=x.dtype)(normalized))
        bias = nn.Dense(self.num_heads, param_dtype=x.dtype)(hidden)
        return jnp.transpose(bias, (2, 0, 1))[None]
