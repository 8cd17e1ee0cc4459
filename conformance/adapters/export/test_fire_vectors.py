"""A minimal pytest loader for the FIRE golden vectors (exported by `fire-conformance copy DIR`).

Fill in `my_bias` (and, if you have them, `my_attention`, `my_vjp`) with calls into your own FIRE,
then run `pytest test_fire_vectors.py`. Needs PyYAML and NumPy (`pip install pyyaml numpy`).
The comparison rule and profiles are spec/numerics.md's: |got - want| <= atol + rtol * scale.
"""

import glob
import hashlib
import os

import numpy as np
import pytest
import yaml

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vectors")
PROFILES = {"exact": (0.0, 0.0), "f64": (0.0, 1e-12), "f32": (0.0, 1e-5), "bf16": (0.0, 3e-2)}
MY_DTYPE = "f32"  # what your implementation computes in
RANK = {"bf16": 1, "f32": 2, "f64": 3}


def my_bias(encoding, queries, keys):
    """Return your bias [H, Q, K] (or [layers, H, Q, K]) for this encoding; raise on invalid input."""
    pytest.skip("fill in my_bias with a call into your implementation")


def load_cases():
    manifest = yaml.safe_load(open(os.path.join(HERE, "MANIFEST.yaml")))
    for entry in manifest["files"]:
        path = os.path.join(HERE, entry["path"])
        data = open(path, "rb").read()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], f"{path} was modified"
        for case in yaml.safe_load(data)["cases"]:
            yield pytest.param(case, id=case["id"])


def tensor(t):
    return np.asarray(t["data"], dtype=np.float64).reshape(t["shape"])


@pytest.mark.parametrize("case", list(load_cases()))
def test_bias(case):
    if case["kind"] != "bias":
        pytest.skip("this loader only checks bias cases")
    profile = case["profile"]
    if profile != "exact" and RANK[MY_DTYPE] < RANK[profile]:
        pytest.skip(f"needs {profile}")
    queries, keys = case["inputs"]["queries"], case["inputs"]["keys"]
    if case["result"] == "invalid":
        with pytest.raises(Exception):
            my_bias(case["encoding"], queries, keys)
        return
    want = case["expected"]["bias"]
    got = np.asarray(my_bias(case["encoding"], queries, keys), dtype=np.float64)
    atol, rtol = PROFILES["exact" if profile == "exact" else MY_DTYPE]
    allowed = atol + rtol * want["scale"]
    w = tensor(want)
    assert got.shape == w.shape, f"{case['id']}: shape {got.shape} != {w.shape}"
    finite = np.isfinite(w)
    bad = ~finite & (got != w) | finite & ~(np.abs(got - w) <= allowed)
    assert not bad.any(), (
        f"{case['id']} [{' '.join(case['clauses'])}]: {bad.sum()} elements differ; "
        f"first at {np.argwhere(bad)[0].tolist()}"
    )
