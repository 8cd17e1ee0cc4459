"""An independent NumPy FIRE, written from spec/fire.md, spec/gradients.md and spec/attention.md.

It shares no code with the Rust reference: it is a second reading of the spec, run through the
real subprocess protocol in CI.

    fire-conformance run --impl "python3 conformance/adapters/numpy_fire.py"
"""

import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fire_kit  # noqa: E402

_erf = np.vectorize(math.erf, otypes=[float])


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
        return np.log1p(z)
    if name == "cos":
        return np.cos(z)
    if name.startswith("power("):
        return np.maximum(z, 0.0) ** power(name)
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
        self.layers = [(l["weight"].array(), l["bias"].array()) for l in mlp["layers"]]
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

    def psi(self, y):
        return np.log1p(abs(self.c) * y) if self.log else y

    def dpsi_dc(self, y):
        return np.sign(self.c) * y / (abs(self.c) * y + 1.0) if self.log else np.zeros_like(y)

    def dpsi_dy(self, y):
        return abs(self.c) / (abs(self.c) * y + 1.0) if self.log else np.ones_like(y)

    def L(self):
        return None if self.threshold == "disabled" else abs(self.m * self.l_init)

    def grid(self, q, k):
        i = np.asarray(q, dtype=np.float64)[:, None] * np.ones((1, len(k)))
        j = np.ones((len(q), 1)) * np.asarray(k, dtype=np.float64)[None, :]
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
            dtop = np.where(L > i, 1.0, np.where(L == i, 0.5, 0.0))
            dL_dm = np.sign(self.m * self.l_init) * self.l_init
            dx_dm = -num * self.dpsi_dy(top) * dtop * dL_dm / den**2
            grads["L_multiplier"] = np.array(np.sum(dx * dx_dm))
        return grads


def attention(bias, case, placement):
    """softmax over causally visible keys of q·kᵀ/√d + b ([attn.logits], [attn.causal])."""
    q, k, v = (case.inputs[n].array() for n in ("q", "k", "v"))
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
        g = case.inputs["cotangent"].array()
        if g.shape != (modules[0].heads, len(case.queries), len(case.keys)):
            raise ValueError("the cotangent is not shaped like the bias")
        return modules[0].vjp(case.queries, case.keys, g)
    raise fire_kit.Skip(f"kind `{case.kind}`")


if __name__ == "__main__":
    fire_kit.serve(build, name="numpy-fire (independent, from the spec)",
                   families=["fire", "fire-s", "fire-grad", "variants", "edge", "attention", "invalid", "theorem-3-1"])
