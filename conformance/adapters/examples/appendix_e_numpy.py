"""A NumPy module with Appendix E's interface, used to test the glue without torch.

It follows Appendix E's steps literally (positions 0..T-1 inside, the full square, the
``[1, H, T, T]`` layout) and names its multiplier ``L_mult`` to exercise ``--map``.
"""

import numpy as np


class AppendixEFire:
    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        self.num_heads, self.mlp_width, self.eps = num_heads, mlp_width, eps
        self.state = {"c": np.array(init_c), "init_L": np.array(init_L), "L_mult": np.array(1.0)}

    def load_state_dict(self, state):
        want = {"mlp.0.weight", "mlp.0.bias", "mlp.2.weight", "mlp.2.bias", "c", "init_L", "L_mult"}
        if set(state) != want:
            raise KeyError(f"state dict keys {sorted(state)} != {sorted(want)}")
        self.state = dict(state)

    def __call__(self, x):
        s = self.state
        seq_len = x.shape[2]
        positions = np.arange(seq_len, dtype=np.float64)
        rel = positions[:, None] - positions[None, :]
        threshold = abs(s["L_mult"] * s["init_L"])
        normalizer = np.maximum(positions, threshold)
        rel = np.log(np.abs(s["c"] * rel) + 1)
        normalizer = np.log(np.abs(s["c"] * normalizer) + 1) + self.eps
        x = (rel / normalizer[:, None])[..., None]
        h = np.maximum(x @ s["mlp.0.weight"].T + s["mlp.0.bias"], 0.0)
        out = h @ s["mlp.2.weight"].T + s["mlp.2.bias"]
        return np.transpose(out, (2, 0, 1))[None]
