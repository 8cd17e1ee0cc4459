"""A ``build(case)`` glue file (``fire_conformance.glue``) that computes FIRE over the whole
square 0..T and gathers the asked rows and columns, declaring ``positions: square`` in its
``CAPABILITIES``; its values are the independent NumPy FIRE's. ``tests/wild.rs`` asserts the
report says the position lists went through the gather."""

import numpy as np

from fire_conformance import kit, numpy_fire

CAPABILITIES = {"name": "square glue", "families": ["fire", "edge"], "dtypes": ["f64"],
                "positions": "square"}


def build(case):
    case.check_positions()
    if case.encoding["type"] != "fire" or case.kind != "bias":
        raise kit.Skip("single FIRE modules' bias only")
    if case.length > 4096:
        raise kit.Skip(f"needs a {case.length} x {case.length} square")
    square = np.arange(case.length)
    return case.gather(numpy_fire.Fire(case.encoding).bias(square, square))
