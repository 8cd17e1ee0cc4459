"""Appendix E's FIRE as a Haiku module: parameters made by ``hk.get_parameter`` (``c`` and the
threshold's multiplier ``L_multiplier``; ``init_L`` and ε stay constants, as Appendix E freezes
them), the MLP two ``hk.Linear`` layers; the module is built and called inside ``hk.transform``.

    fire-conformance run --impl "fire-conformance-jax haiku_fire.py:FIRE"
    pytest --fire-impl haiku_fire.py:FIRE
"""

import haiku as hk
import jax
import jax.numpy as jnp


class FIRE(hk.Module):
    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6, name=None):
        super().__init__(name=name)
        self.num_heads, self.mlp_width = num_heads, mlp_width
        self.init_c, self.init_L, self.eps = init_c, init_L, eps

    def __call__(self, x):
        c = hk.get_parameter("c", [], init=hk.initializers.Constant(self.init_c))
        multiplier = hk.get_parameter("L_multiplier", [], init=hk.initializers.Constant(1.0))
        seq_length = x.shape[2]
        positions = jnp.arange(seq_length, dtype=x.dtype)
        rel_distance = positions[:, None] - positions[None, :]
        threshold = jnp.abs(multiplier * self.init_L)
        pos_normalizer = jnp.maximum(positions, threshold)[:, None]
        rel_distance = jnp.log(jnp.abs(c * rel_distance) + 1)
        pos_normalizer = jnp.log(jnp.abs(c * pos_normalizer) + 1) + self.eps
        normalized = (rel_distance / pos_normalizer)[..., None]
        hidden = jax.nn.relu(hk.Linear(self.mlp_width)(normalized))
        bias = hk.Linear(self.num_heads)(hidden)
        return jnp.transpose(bias, (2, 0, 1))[None]
