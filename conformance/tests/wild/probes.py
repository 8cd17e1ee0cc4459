"""The glues' probes of a module's inputs checked on their own, on position lists no vector of the
suite holds (``tests/wild.rs``): a correct ``forward(positions)`` given consecutive positions
reversed (its bias below L the same as 0..n's) is not told it counts, where one that counts is."""

import sys

import numpy as np

from fire_conformance import calls

sys.path.insert(0, sys.argv[1])
import appendix_e_fakes as fakes  # noqa: E402


def module(cls):
    m = cls(num_heads=2, mlp_width=4)
    rng = np.random.default_rng(0)
    m.load_state_dict({"c": np.float64(0.3), "init_L": np.float64(512.0), "L_multiplier": np.float64(1.0),
                       "mlp.0.weight": rng.standard_normal((4, 1)), "mlp.0.bias": rng.standard_normal(4),
                       "mlp.2.weight": rng.standard_normal((2, 4)), "mlp.2.bias": rng.standard_normal(2)})
    return m


for listed in ([7, 6, 5, 4, 3, 2, 1, 0], [3, 4, 5, 6], [10, 8, 6, 4]):
    probe = calls.counted(listed)
    assert probe is not None, listed
    correct = module(fakes.PositionList)
    calls.check_positions_used(correct(listed), correct(probe), listed, probe)
    counting = module(fakes.PositionListAsIndices)
    try:
        calls.check_positions_used(counting(listed), counting(probe), listed, probe)
    except calls.PositionsIgnored:
        pass
    else:
        raise AssertionError(f"a module that counts was not told so on {listed}")
assert calls.counted(list(range(6))) is None
print("ok")
