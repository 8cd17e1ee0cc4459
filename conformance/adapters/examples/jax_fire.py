"""Appendix E's FIRE in plain JAX, with Flax linen's interface: ``init(rng, x) -> variables`` and
``apply(variables, x) -> [1, H, T, T]``, the parameters in a ``params`` tree named as ``nn.Dense``
names them (``Dense_0/kernel`` is ``[in, out]``) and ``init_L`` a constant outside it. It needs
jax only; ``flax_fire.py`` is the same module written with ``flax.linen``.

    fire-conformance run --impl "fire-conformance-jax jax_fire.py:FIRE"
    pytest --fire-impl jax_fire.py:FIRE
"""

import jax
import jax.numpy as jnp


class FIRE:
    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        self.num_heads, self.mlp_width = num_heads, mlp_width
        self.init_c, self.init_L, self.eps = init_c, init_L, eps

    def init(self, rng, x):
        k0, k1 = jax.random.split(rng)
        w, h = self.mlp_width, self.num_heads
        return {
            "params": {
                "Dense_0": {"kernel": jax.random.normal(k0, (1, w)), "bias": jnp.zeros(w)},
                "Dense_1": {"kernel": jax.random.normal(k1, (w, h)) / w**0.5, "bias": jnp.zeros(h)},
                "c": jnp.asarray(self.init_c),
                "L_multiplier": jnp.asarray(1.0),
            },
            "constants": {"init_L": jnp.asarray(self.init_L)},
        }

    def apply(self, variables, x):
        p, init_L = variables["params"], variables["constants"]["init_L"]
        seq_length = x.shape[2]
        positions = jnp.arange(seq_length, dtype=x.dtype)
        rel_distance = positions[:, None] - positions[None, :]
        threshold = jnp.abs(p["L_multiplier"] * init_L)
        pos_normalizer = jnp.maximum(positions, threshold)[:, None]
        rel_distance = jnp.log(jnp.abs(p["c"] * rel_distance) + 1)
        pos_normalizer = jnp.log(jnp.abs(p["c"] * pos_normalizer) + 1) + self.eps
        normalized = (rel_distance / pos_normalizer)[..., None]
        hidden = jax.nn.relu(normalized @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"])
        bias = hidden @ p["Dense_1"]["kernel"] + p["Dense_1"]["bias"]
        return jnp.transpose(bias, (2, 0, 1))[None]
