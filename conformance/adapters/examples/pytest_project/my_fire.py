"""A small FIRE in NumPy, shaped like the paper's Appendix E: the constructor
``(num_heads, mlp_width, init_c, init_L, eps)``, parameters ``mlp.0.weight``, ``mlp.0.bias``,
``mlp.2.weight``, ``mlp.2.bias``, ``c``, ``init_L``, ``L_multiplier``, and ``forward(x)`` returning
``[1, H, T, T]`` for ``T = x.shape[2]``. It computes in the dtype of the parameters it is loaded
with, and rejects parameters that make FIRE undefined (spec/fire.md), so both verdicts pass.
A PyTorch ``nn.Module`` of this shape, or a Flax one, is checked the same way.
"""

import numpy as np

NAMES = ("mlp.0.weight", "mlp.0.bias", "mlp.2.weight", "mlp.2.bias", "c", "init_L", "L_multiplier")


class FIRE:
    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        if not eps >= 0:
            raise ValueError(f"eps must be >= 0, got {eps}")
        self.num_heads, self.mlp_width, self.eps = num_heads, mlp_width, eps

    def load_state_dict(self, state):
        if set(state) != set(NAMES):
            raise KeyError(f"state dict keys {sorted(state)} != {sorted(NAMES)}")
        for name, value in state.items():
            if not np.all(np.isfinite(value)):
                raise ValueError(f"{name} is not finite")
        if state["c"] == 0:
            raise ValueError("c = 0 makes the transform vanish")
        if not state["init_L"] > 0:
            raise ValueError("init_L must be > 0")
        if self.eps == 0 and state["L_multiplier"] == 0:
            raise ValueError("eps = 0 with a zero threshold divides by zero at query 0")
        self.s = dict(state)
        self.dt = state["c"].dtype

    def positions(self, seq_len):
        return np.arange(seq_len, dtype=self.dt)

    def forward(self, x):
        s = self.s
        positions = self.positions(x.shape[2])
        rel = positions[:, None] - positions[None, :]
        threshold = np.abs(s["L_multiplier"] * s["init_L"])
        normalizer = np.maximum(positions, threshold)[:, None]
        rel = np.log(np.abs(s["c"] * rel) + 1)
        normalizer = np.log(np.abs(s["c"] * normalizer) + 1) + self.dt.type(self.eps)
        h = np.maximum((rel / normalizer)[..., None] @ s["mlp.0.weight"].T + s["mlp.0.bias"], 0)
        out = h @ s["mlp.2.weight"].T + s["mlp.2.bias"]
        return np.transpose(out, (2, 0, 1))[None]

    __call__ = forward
