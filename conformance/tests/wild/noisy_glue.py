"""A ``build(case)`` glue file (``fire_conformance.glue``) that prints at import and in ``build``;
its values are the independent NumPy FIRE's. ``tests/wild.rs`` asserts the prints reach
standard error, not the protocol."""

from fire_conformance import numpy_fire

print("glue imported")
CAPABILITIES = {"name": "noisy glue", "families": ["fire", "edge", "invalid"]}


def build(case):
    print("building", case.id)
    return numpy_fire.build(case)
