"""Small "wild" glues written with the fire_kit protocol helper, one per symptom that lives in the
glue rather than the module (``python3 glues.py NAME``). ``tests/wild.rs`` asserts the harness's
exact verdict on each.

    positions-as-indices  evaluates the position lists' indices 0..n-1 instead of the positions
    future-negated        right on the causal triangle, signed distances after the query (NaN or
                          negative there), declares future_keys="negated"; computes gradients
    future-finfo-min      right on the causal triangle, masks keys after the query with
                          np.finfo(np.float32).min as HF-style models do, declares "masked"
    t5-binary64           the official T5 bucketing computed in float64
    prints                the independent NumPy FIRE, printing to standard output in build
    fire-f32-only         the independent NumPy implementation, whose FIRE kernel is f32 only:
                          the baselines in f64, FIRE skipped as a dtype it cannot compute in
    bias-path-dtype       the independent NumPy FIRE whose gradients compute, but whose bias (an
                          inference path of its own) says it cannot compute in the dtype
    gradients-skipped     the independent NumPy FIRE, every gradient case skipped (no autograd)
    list-of-heads         the independent NumPy FIRE's bias returned as a list of per-head arrays
    returns-none          a build that forgets to return the bias
    bare-assert           a build failing a bare ``assert`` (no message) on every case
    notes                 the independent NumPy FIRE, noting on each reply how it answered
    cut-when-long         the independent NumPy FIRE, whose gradients are cut (zero) past 1 024
                          positions, as a `no_grad` taken there "to save memory" cuts them
    refused-when-long     the independent NumPy FIRE, refusing gradients past 1 024 positions
    quantised-when-long   the independent NumPy FIRE, its bias rounded to 1/256 past 1 024 keys (a
                          table lookup "for speed"): no value case asks for that many
    flat-gradients        the independent NumPy FIRE, its gradients flattened and shaped back by
                          ``case.shape_of`` (the README's gradient glue)
    cut-past-128          the same cut past 128 positions, which the check's first, shorter call
                          (257 positions) finds
    slow-when-long        the independent NumPy FIRE, its gradients slowed by a pause growing
                          with the square (4 µs a position pair, 17 s at 2 049)
"""

import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "adapters"))
import fire_kit  # noqa: E402
import numpy_fire  # noqa: E402


def positions_as_indices(case):
    case.check_positions()
    if case.encoding["type"] != "fire" or case.kind != "bias":
        raise fire_kit.Skip("single FIRE modules, bias only")
    m = numpy_fire.Fire(case.encoding)
    return m.bias(list(range(len(case.queries))), list(range(len(case.keys))))


def future_negated(case):
    case.check_positions()
    if case.encoding["type"] != "fire" or case.kind not in ("bias", "vjp"):
        raise fire_kit.Skip("single FIRE modules, bias and gradients")
    m = numpy_fire.Fire(case.encoding)
    if case.kind == "vjp":
        g = case.inputs["cotangent"].array()
        if g.shape != (m.heads, len(case.queries), len(case.keys)):
            raise ValueError("the cotangent is not shaped like the bias")
        return m.vjp(case.queries, case.keys, g)
    b = m.bias(case.queries, case.keys)
    i = np.asarray(case.queries, dtype=float)[:, None]
    j = np.asarray(case.keys, dtype=float)[None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        signed = np.log1p(abs(m.c) * (i - j)) / (m.psi(np.maximum(i, m.L() or 0.0)) + m.eps)
        wrong, _, _ = m.forward(signed)
    return np.where((j > i)[None], np.moveaxis(wrong, -1, 0), b)


def future_finfo_min(case):
    case.check_positions()
    if case.encoding["type"] != "fire" or case.kind not in ("bias", "vjp"):
        raise fire_kit.Skip("single FIRE modules, bias and gradients")
    m = numpy_fire.Fire(case.encoding)
    if case.kind == "vjp":
        return m.vjp(case.queries, case.keys, case.inputs["cotangent"].array())
    b = m.bias(case.queries, case.keys)
    i = np.asarray(case.queries, dtype=float)[:, None]
    j = np.asarray(case.keys, dtype=float)[None, :]
    return np.where((j > i)[None], float(np.finfo(np.float32).min), b)


def t5_binary64(case):
    case.check_positions()
    enc = case.encoding
    if enc["type"] != "baseline" or enc["name"] != "t5-official" or case.kind != "bias":
        raise fire_kit.Skip("official T5 bias only")
    s = enc["settings"]
    nb, md = s["num_buckets"], s["max_distance"]
    values = enc["params"]["values"].array()
    if s["bidirectional"]:
        raise fire_kit.Skip("unidirectional only")
    if values.shape[1] != nb or md <= nb // 2 or nb < 2:
        raise ValueError("invalid T5 configuration")
    n = np.maximum(np.asarray(case.queries)[:, None] - np.asarray(case.keys)[None, :], 0)
    exact = nb // 2
    with np.errstate(divide="ignore"):
        large = exact + (np.log(n / exact) / math.log(md / exact) * (nb - exact)).astype(np.int64)
    bucket = np.where(n < exact, n, np.minimum(large, nb - 1))
    return values[:, bucket]


def prints(case):
    print("case", case.id)
    return numpy_fire.build(case)


def fire_f32_only(case):
    if case.encoding["type"].startswith("fire"):
        raise fire_kit.UnsupportedDtype("the FIRE kernel computes in float32 only")
    return numpy_fire.build(case)


def bias_path_dtype(case):
    if case.encoding["type"].startswith("fire") and case.kind == "bias":
        raise fire_kit.UnsupportedDtype("the inference path returns float64")
    return numpy_fire.build(case)


def gradients_skipped(case):
    if case.kind == "vjp":
        raise fire_kit.Skip("no autograd here")
    return numpy_fire.build(case)


def list_of_heads(case):
    out = numpy_fire.build(case)
    return list(out) if case.kind == "bias" else out


def returns_none(case):
    numpy_fire.build(case)


def bare_assert(case):
    assert case.kind == "none"


def notes(case):
    case.note(f"answered by the NumPy FIRE ({case.kind})")
    # The same text again, spaced otherwise: one note.
    case.note(f"  answered by\tthe NumPy FIRE ({case.kind})\n")
    if case.kind == "vjp":
        case.note("gradients by hand")
    return numpy_fire.build(case)


def cut_past(limit):
    """The NumPy FIRE whose gradients are zero past ``limit`` positions."""
    def build(case):
        out = numpy_fire.build(case)
        if case.kind == "vjp" and case.length > limit:
            return {name: np.zeros_like(v) for name, v in out.items()}
        return out
    return build


def quantised_when_long(case):
    out = numpy_fire.build(case)
    if case.kind == "bias" and len(case.keys) > 1024:
        return np.round(out * 256) / 256
    return out


def flat_gradients(case):
    out = numpy_fire.build(case)
    if case.kind != "vjp":
        return out
    try:
        case.shape_of("mlp.1.weight")  # an activation, no parameter
    except KeyError:
        return {name: np.ravel(out[name]).reshape(case.shape_of(name)) for name in case.outputs}
    raise AssertionError("shape_of named a parameter the encoding does not have")


def slow_when_long(case):
    if case.kind == "vjp" and case.length > 100:
        time.sleep(case.length**2 * 4e-6)
    return numpy_fire.build(case)


def refused_when_long(case):
    if case.kind == "vjp" and case.length > 1024:
        raise MemoryError("no gradients past 1 024 positions on this machine")
    return numpy_fire.build(case)


GLUES = {
    "positions-as-indices": (positions_as_indices, {}),
    "future-negated": (future_negated, {"future_keys": "negated",
                                         "families": ["fire", "fire-grad", "edge", "invalid"]}),
    "future-finfo-min": (future_finfo_min, {"future_keys": "masked",
                                             "families": ["fire", "fire-grad", "edge", "invalid"]}),
    "t5-binary64": (t5_binary64, {}),
    "prints": (prints, {"families": ["fire", "edge", "invalid"]}),
    "fire-f32-only": (fire_f32_only, {}),
    "bias-path-dtype": (bias_path_dtype, {}),
    "gradients-skipped": (gradients_skipped, {}),
    "list-of-heads": (list_of_heads, {"families": ["fire"]}),
    "returns-none": (returns_none, {"families": ["fire"]}),
    "bare-assert": (bare_assert, {"families": ["fire"]}),
    "notes": (notes, {"families": ["fire", "fire-grad"]}),
    "cut-when-long": (cut_past(1024), {"families": ["fire", "fire-grad"]}),
    "refused-when-long": (refused_when_long, {"families": ["fire", "fire-grad"]}),
    "quantised-when-long": (quantised_when_long, {"families": ["fire", "fire-grad"]}),
    "flat-gradients": (flat_gradients, {"families": ["fire", "fire-grad"]}),
    "cut-past-128": (cut_past(128), {"families": ["fire", "fire-grad"]}),
    "slow-when-long": (slow_when_long, {"families": ["fire", "fire-grad"]}),
}

if __name__ == "__main__":
    build, conventions = GLUES[sys.argv[1]]
    fire_kit.serve(build, name=f"wild glue: {sys.argv[1]}", dtypes=["f64"], **conventions)
