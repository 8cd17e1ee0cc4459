"""An independent NumPy FIRE, written from spec/fire.md, spec/gradients.md, spec/attention.md and
spec/baselines.md (official T5, Alibi, Kerple, NoPE).

It shares no code with the Rust reference: it is a second reading of the spec, run through the
real subprocess protocol in CI, in float64 or (``--dtype f32``) float32 arithmetic.

    fire-conformance run --impl "fire-conformance-numpy"            # installed with pip
    fire-conformance run --impl "python3 -m fire_conformance.numpy_fire --dtype f32"
    fire-conformance run --impl "python3 conformance/adapters/numpy_fire.py"   # in the repository
"""

import argparse
import math

import numpy as np

from fire_conformance import kit as fire_kit

_erf64 = np.vectorize(math.erf, otypes=[float])

# The arithmetic: float64 unless --dtype f32 (set once in main).
DT = np.float64


def _erf(z):
    return _erf64(z).astype(z.dtype)


def sigma(name, z):
    """The activations of [fire.activation]."""
    if name == "relu":
        return np.maximum(z, 0.0)
    if name == "gelu":
        return 0.5 * z * (1.0 + _erf(z / math.sqrt(2.0)))
    if name == "identity":
        return z
    if name == "heaviside":
        return np.where(z >= 0.0, 1.0, 0.0)
    if name == "log1p":
        if np.any(z <= -1.0):
            raise ValueError("a log1p unit's pre-activation is <= -1, outside its domain")
        return np.log1p(z)
    if name == "cos":
        return np.cos(z)
    if name.startswith("power("):
        return np.maximum(z, 0.0) ** DT(power(name))
    raise ValueError(f"unknown activation {name}")


def dsigma(name, z):
    """Derivatives with the kink conventions of [grad.kinks]."""
    if name == "relu":
        return np.where(z > 0.0, 1.0, 0.0)
    if name == "gelu":
        return 0.5 * (1.0 + _erf(z / math.sqrt(2.0))) + z * np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    if name == "identity":
        return np.ones_like(z)
    if name == "heaviside":
        return np.zeros_like(z)
    if name == "log1p":
        return 1.0 / (1.0 + z)
    if name == "cos":
        return -np.sin(z)
    if name.startswith("power("):
        p = power(name)
        return np.where(z > 0.0, p * np.maximum(z, 0.0) ** (p - 1.0), 0.0)
    raise ValueError(f"unknown activation {name}")


def power(name):
    p = float(name[len("power("):-1])
    if not p > 0:
        raise ValueError("power(p) needs p > 0")
    return p


class Fire:
    """One FIRE module, validated as [fire.params] requires."""

    def __init__(self, enc):
        mlp = enc["mlp"]
        self.act = mlp["activation"]
        self.final = mlp.get("final_activation")
        self.layers = [(l["weight"].array().astype(DT), l["bias"].array().astype(DT)) for l in mlp["layers"]]
        self.c, self.l_init, self.m, self.eps = (float(enc[k]) for k in ("c", "l_init", "l_multiplier", "eps"))
        self.log = {"log": True, "identity": False}[enc["transform"]]
        self.threshold = enc["threshold"]
        if self.threshold not in ("learnable", "fixed", "disabled"):
            raise ValueError(f"unknown threshold mode {self.threshold}")
        if not self.layers:
            raise ValueError("the MLP has no layers")
        width = 1
        for n, (w, b) in enumerate(self.layers):
            if w.ndim != 2 or w.shape[1] != width or w.shape[0] == 0 or b.shape != (w.shape[0],):
                raise ValueError(f"layer {n}: shapes do not chain")
            if not (np.all(np.isfinite(w)) and np.all(np.isfinite(b))):
                raise ValueError(f"layer {n}: non-finite parameter")
            width = w.shape[0]
        for name in [self.act] + ([self.final] if self.final else []):
            sigma(name, np.zeros(1))
        for k in ("c", "l_init", "m", "eps"):
            if not math.isfinite(getattr(self, k)):
                raise ValueError(f"{k} is not finite")
        if self.l_init <= 0:
            raise ValueError("L_init must be > 0")
        if self.eps < 0:
            raise ValueError("eps must be >= 0")
        if self.log and self.c == 0:
            raise ValueError("c = 0 with the log transform")
        if self.eps == 0 and (self.threshold == "disabled" or self.m == 0):
            raise ValueError("the normaliser at query 0 is 0")
        self.heads = width
        self.c, self.l_init, self.m, self.eps = (DT(v) for v in (self.c, self.l_init, self.m, self.eps))

    def psi(self, y):
        return np.log1p(abs(self.c) * y) if self.log else y

    def dpsi_dc(self, y):
        return np.sign(self.c) * y / (abs(self.c) * y + 1.0) if self.log else np.zeros_like(y)

    def dpsi_dy(self, y):
        return abs(self.c) / (abs(self.c) * y + 1.0) if self.log else np.ones_like(y)

    def L(self):
        return None if self.threshold == "disabled" else abs(self.m * self.l_init)

    def grid(self, q, k):
        i = np.asarray(q, dtype=DT)[:, None] * np.ones((1, len(k)), dtype=DT)
        j = np.ones((len(q), 1), dtype=DT) * np.asarray(k, dtype=DT)[None, :]
        return i, j

    def inputs(self, q, k):
        """x(i, j) = ψ(|i − j|) / (ψ(max(i, L)) + ε) over the grid, with its pieces."""
        i, j = self.grid(q, k)
        L = self.L()
        top = i if L is None else np.maximum(i, L)
        num = self.psi(np.abs(i - j))
        den = self.psi(top) + self.eps
        return num / den, (i, j, top, num, den)

    def forward(self, x):
        """The MLP on every element of x: returns ([..., H], pre-activations, activations)."""
        a = [x[..., None]]
        zs = []
        for n, (w, b) in enumerate(self.layers):
            z = a[-1] @ w.T + b
            zs.append(z)
            last = n == len(self.layers) - 1
            name = self.final if last else self.act
            a.append(sigma(name, z) if name else z)
        return a[-1], zs, a

    def bias(self, q, k):
        x, _ = self.inputs(q, k)
        out, _, _ = self.forward(x)
        return np.moveaxis(out, -1, 0)  # [H, Q, K]

    def vjp(self, q, k, g):
        """Gradients of Σ G ⊙ b, named as Appendix E's state dict ([grad.vjp])."""
        x, (i, j, top, num, den) = self.inputs(q, k)
        out, zs, a = self.forward(x)
        delta = np.moveaxis(g, 0, -1)  # [Q, K, H]
        if self.final:
            delta = delta * dsigma(self.final, zs[-1])
        grads = {}
        for n in reversed(range(len(self.layers))):
            w, _ = self.layers[n]
            grads[f"mlp.{2 * n}.weight"] = np.einsum("qkh,qkm->hm", delta, a[n])
            grads[f"mlp.{2 * n}.bias"] = delta.sum(axis=(0, 1))
            back = delta @ w
            delta = back * dsigma(self.act, zs[n - 1]) if n > 0 else back
        dx = delta[..., 0]
        dx_dc = (self.dpsi_dc(np.abs(i - j)) * den - num * self.dpsi_dc(top)) / den**2
        grads["c"] = np.array(np.sum(dx * dx_dc))
        if self.threshold == "learnable":
            L = self.L()
            dtop = np.where(L > i, 1.0, np.where(L == i, 0.5, 0.0)).astype(DT)
            dL_dm = np.sign(self.m * self.l_init) * self.l_init
            dx_dm = -num * self.dpsi_dy(top) * dtop * dL_dm / den**2
            grads["L_multiplier"] = np.array(np.sum(dx * dx_dm))
        return grads


def attention(bias, case, placement):
    """softmax over causally visible keys of q·kᵀ/√d + b ([attn.logits], [attn.causal])."""
    q, k, v = (case.inputs[n].array().astype(DT) for n in ("q", "k", "v"))
    heads, nq, d = q.shape
    if bias.shape[0] != heads or k.shape[:2] != (heads, len(case.keys)) or nq != len(case.queries):
        raise ValueError("attention inputs do not match the bias")
    raw = q @ np.swapaxes(k, 1, 2)
    s = raw / math.sqrt(d) + bias if placement == "after-scaling" else (raw + bias) / math.sqrt(d)
    visible = np.asarray(case.keys)[None, :] <= np.asarray(case.queries)[:, None]
    if not visible.any(axis=1).all():
        raise ValueError("a query sees no key")
    s = np.where(visible[None], s, -np.inf)
    s = s - s.max(axis=-1, keepdims=True)
    w = np.exp(s)
    w = w / w.sum(axis=-1, keepdims=True)
    return w @ v


def per_head(params, name, heads=None):
    """A per-head parameter list ([baselines.heads]): one axis, finite, H entries."""
    t = params.get(name)
    if t is None:
        raise ValueError(f"parameter `{name}` is missing")
    v = t.array()
    if v.ndim != 1 or v.size == 0 or (heads is not None and v.size != heads):
        raise ValueError(f"`{name}` must hold one value per head")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"`{name}` is not finite")
    return v.astype(DT)


def t5_bucket(rel, num_buckets, max_distance, bidirectional):
    """mesh-tensorflow's _relative_position_bucket, in float32 as its code computes
    ([t5.bucket.official], [t5.bucket.official.float])."""
    n = -rel
    ret = np.zeros_like(n)
    if bidirectional:
        num_buckets //= 2
        ret += (n < 0).astype(np.int64) * num_buckets
        n = np.abs(n)
    else:
        n = np.maximum(n, 0)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    with np.errstate(divide="ignore"):
        large = max_exact + (
            np.log(n.astype(np.float32) / np.float32(max_exact))
            / np.float32(math.log(max_distance / max_exact))
            * np.float32(num_buckets - max_exact)
        ).astype(np.int64)
    large = np.minimum(large, num_buckets - 1)
    return ret + np.where(is_small, n, large)


def alibi_slopes(heads):
    """[alibi.slopes]: 2^(-8h/P) for the largest power of two P <= H, then every other slope of 2P."""
    if heads < 1:
        raise ValueError("Alibi needs at least one head")
    p = 2 ** int(math.floor(math.log2(heads)))
    first = [2.0 ** (-8.0 * h / p) for h in range(1, p + 1)]
    rest = [2.0 ** (-8.0 * (2 * m - 1) / (2 * p)) for m in range(1, heads - p + 1)]
    return np.asarray(first + rest, dtype=DT)


def baseline(enc, q, k):
    """The additive baselines of spec/baselines.md that this reading implements: [H, Q, K]."""
    name, settings, params = enc["name"], enc["settings"], enc["params"]
    i = np.asarray(q, dtype=np.int64)[:, None]
    j = np.asarray(k, dtype=np.int64)[None, :]
    dist = np.abs(i - j).astype(DT)
    if name == "t5-official":
        nb, md, bi = settings["num_buckets"], settings["max_distance"], settings["bidirectional"] != 0
        if (bi and (nb < 4 or nb % 2)) or (not bi and nb < 2):
            raise ValueError(f"invalid num_buckets {nb}")
        if md <= (nb // 2 if bi else nb) // 2:
            raise ValueError("max_distance must exceed max_exact")
        values = params["values"].array()
        if values.ndim != 2 or values.shape[1] != nb or not np.all(np.isfinite(values)):
            raise ValueError("values must be [H, num_buckets] and finite")
        return values.astype(DT)[:, t5_bucket(j - i, nb, md, bi)]
    if name in ("alibi", "alibi-standard"):
        slopes = per_head(params, "slopes") if name == "alibi" else alibi_slopes(settings["heads"])
        if np.any(slopes <= 0):
            raise ValueError("Alibi slopes must be > 0")
        return -slopes[:, None, None] * dist[None]
    if name in ("kerple-log", "kerple-power"):
        r1 = per_head(params, "r1")
        r2 = per_head(params, "r2", r1.size)
        if np.any(r1 <= 0) or np.any(r2 <= 0) or (name == "kerple-power" and np.any(r2 > 2)):
            raise ValueError("Kerple parameters out of range")
        if name == "kerple-log":
            return -r1[:, None, None] * np.log1p(r2[:, None, None] * dist[None])
        return -r1[:, None, None] * dist[None] ** r2[:, None, None]
    if name == "nope":
        if settings["heads"] < 1:
            raise ValueError("NoPE needs at least one head")
        return np.zeros((settings["heads"], len(q), len(k)), dtype=DT)
    raise fire_kit.Skip(f"baseline `{name}` is not implemented here")


def reference(case):
    """The case's bias by this FIRE, for the glues' own checks (``steps``, ``repeats``); ``None``
    where the encoding is not FIRE's or is one this FIRE refuses (an invalid case's, which the
    module, not the glue, must reject [vec.invalid])."""
    if case.encoding.get("type") != "fire":
        return None
    try:
        return Fire(case.encoding).bias(case.queries, case.keys)
    except (ValueError, KeyError, TypeError, FloatingPointError):
        return None


def build(case):
    case.check_positions()
    enc = case.encoding
    kind = enc["type"]
    if kind == "fire":
        modules, stacked = [Fire(enc)], False
    elif kind == "fire-shared":
        if enc["layers"] < 1:
            raise ValueError("FIRE-S needs at least one layer")
        modules, stacked = [Fire(enc["module"])] * enc["layers"], True
    elif kind == "fire-per-layer":
        if not enc["modules"]:
            raise ValueError("no modules")
        modules, stacked = [Fire(m) for m in enc["modules"]], True
    elif kind == "baseline":
        if case.kind == "vjp":
            raise fire_kit.Skip("gradients are for FIRE modules")
        b = baseline(enc, case.queries, case.keys)
        return b if case.kind == "bias" else attention(b, case, "after-scaling")
    else:
        raise fire_kit.Skip(f"encoding `{kind}` is not implemented here")
    if case.kind == "bias":
        biases = [m.bias(case.queries, case.keys) for m in modules]
        return np.stack(biases) if stacked else biases[0]
    if case.kind == "attention":
        if stacked:
            raise ValueError("attention takes a single module")
        return attention(modules[0].bias(case.queries, case.keys), case, "after-scaling")
    if case.kind == "vjp":
        if stacked:
            raise ValueError("gradients take a single module")
        g = case.inputs["cotangent"].array().astype(DT)
        if g.shape != (modules[0].heads, len(case.queries), len(case.keys)):
            raise ValueError("the cotangent is not shaped like the bias")
        return modules[0].vjp(case.queries, case.keys, g)
    raise fire_kit.Skip(f"kind `{case.kind}`")


def main(argv=None):
    global DT
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", default="f64", choices=["f64", "f32"])
    a = p.parse_args(argv)
    DT = np.float64 if a.dtype == "f64" else np.float32
    fire_kit.serve(build, name=f"numpy-fire (independent, from the spec, {a.dtype})", dtypes=[a.dtype],
                   long_length=False, state=None)  # this is FIRE's own computation


if __name__ == "__main__":
    main()
