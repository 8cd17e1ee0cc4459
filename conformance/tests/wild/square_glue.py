"""A ``build(case)`` glue file (``fire_conformance.glue``) that computes FIRE over the whole
square 0..T and gathers the asked rows and columns, declaring ``positions: square`` in its
``CAPABILITIES``; its values are the independent NumPy FIRE's. ``tests/wild.rs`` asserts the
report says the position lists went through the gather, and that the kit skips the cases whose
square is past 4 096 without a guard here (the suite's positions reach 10⁶; audit 32: the
README's template, which has none, ran out of memory on them)."""

import numpy as np

from fire_conformance import kit, numpy_fire

CAPABILITIES = {"name": "square glue", "families": ["fire", "edge"], "dtypes": ["f64"],
                "positions": "square"}


def build(case):
    case.check_positions()
    if case.encoding["type"] != "fire" or case.kind != "bias":
        raise kit.Skip("single FIRE modules' bias only")
    square = np.arange(case.length)
    return case.gather(numpy_fire.Fire(case.encoding).bias(square, square))
