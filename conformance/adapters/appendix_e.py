"""Ready-made glue for FIRE modules shaped like the paper's Appendix E.

Such a module is constructed as ``Class(num_heads, mlp_width, init_c, init_L, eps)``, holds the
parameters ``mlp.0.weight``, ``mlp.0.bias``, ``mlp.2.weight``, ``mlp.2.bias``, ``c``, ``init_L``,
``L_multiplier``, and its ``forward(x)`` reads ``seq_len = x.shape[2]`` and returns the
``[1, num_heads, seq_len, seq_len]`` bias for positions 0..seq_len-1. Point the harness at yours:

    fire-conformance run --impl "python3 conformance/adapters/appendix_e.py path/to/model.py:FIRE"

Options (after the module spec):
    --map OURS=THEIRS   rename a parameter (repeatable), e.g. --map L_multiplier=L_mult
    --dtype f32|f64     the dtype your module computes in (default f32; selects the tolerance)
    --future-keys X     mirrored (Appendix E, default), zero, masked or negated
    --max-len N         the largest T x T square to evaluate (default 4096); larger cases skip
    --kwargs JSON       extra constructor keyword arguments

With torch installed the module is a torch ``nn.Module`` and gradients (``fire-grad/``) come from
autograd; without torch, a NumPy module with the same interface (``load_state_dict`` taking
arrays) works for bias cases.
"""

import argparse
import importlib.util
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fire_kit  # noqa: E402

try:
    import torch
except ImportError:  # the glue still serves NumPy modules
    torch = None

NAMES = ["mlp.0.weight", "mlp.0.bias", "mlp.2.weight", "mlp.2.bias", "c", "init_L", "L_multiplier"]


def load_class(spec):
    path, _, cls = spec.rpartition(":")
    if not path or not cls:
        raise SystemExit(f"expected path/to/file.py:ClassName, got {spec!r}")
    mod_spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
    module = importlib.util.module_from_spec(mod_spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    mod_spec.loader.exec_module(module)
    return getattr(module, cls)


class Glue:
    def __init__(self, cls, mapping, dtype, max_len, kwargs):
        self.cls, self.mapping, self.dtype, self.max_len, self.kwargs = cls, mapping, dtype, max_len, kwargs

    def params(self, enc):
        mlp = enc["mlp"]
        if enc["type"] != "fire":
            raise fire_kit.Skip(f"encoding `{enc['type']}`: this glue drives one Appendix E module")
        if (len(mlp["layers"]) != 2 or mlp["activation"] != "relu" or mlp.get("final_activation")
                or enc["transform"] != "log" or enc["threshold"] == "disabled"):
            raise fire_kit.Skip("not Appendix E's architecture (one ReLU hidden layer, log, a threshold)")
        (w0, b0), (w2, b2) = ((l["weight"].array(), l["bias"].array()) for l in mlp["layers"])
        ours = {"mlp.0.weight": w0, "mlp.0.bias": b0, "mlp.2.weight": w2, "mlp.2.bias": b2,
                "c": np.array(enc["c"]), "init_L": np.array(enc["l_init"]),
                "L_multiplier": np.array(enc["l_multiplier"])}
        return w2.shape[0], w0.shape[0], ours

    def module(self, case):
        enc = case.encoding
        heads, width, ours = self.params(enc)
        m = self.cls(num_heads=heads, mlp_width=width, init_c=enc["c"], init_L=enc["l_init"],
                     eps=enc["eps"], **self.kwargs)
        state = {self.mapping.get(k, k): v for k, v in ours.items()}
        if torch is not None and isinstance(m, torch.nn.Module):
            dt = torch.float64 if self.dtype == "f64" else torch.float32
            m = m.to(dt)
            m.load_state_dict({k: torch.as_tensor(v, dtype=dt) for k, v in state.items()}, strict=True)
        else:
            m.load_state_dict(state)
        return m, heads

    def build(self, case):
        case.check_positions()
        if case.kind not in ("bias", "vjp"):
            raise fire_kit.Skip(f"kind `{case.kind}`: the module returns the bias only")
        T = case.length
        if T > self.max_len:
            raise fire_kit.Skip(f"needs a {T} x {T} square (> --max-len {self.max_len})")
        m, heads = self.module(case)
        if torch is not None and isinstance(m, torch.nn.Module):
            dt = next(m.parameters()).dtype
            full = m(torch.zeros(1, heads, T, 1, dtype=dt))[0]
            if case.kind == "bias":
                return case.gather(full.detach().cpu().double().numpy())
            g = torch.zeros(heads, T, T, dtype=dt)
            cot = torch.as_tensor(case.inputs["cotangent"].array(), dtype=dt)
            for qi, i in enumerate(case.queries):
                for ki, j in enumerate(case.keys):
                    g[:, i, j] += cot[:, qi, ki]
            (full * g).sum().backward()
            back = {v: k for k, v in self.mapping.items()}
            grads = {back.get(n, n): p.grad for n, p in m.named_parameters() if p.requires_grad}
            if case.encoding["threshold"] != "learnable":
                grads.pop("L_multiplier", None)
            return {k: v if v is not None else torch.zeros(()) for k, v in grads.items()}
        if case.kind == "vjp":
            raise fire_kit.Skip("gradients need a torch module")
        full = np.asarray(m(np.zeros((1, heads, T, 1))))[0]
        return case.gather(full)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("module", help="path/to/file.py:ClassName")
    p.add_argument("--map", action="append", default=[], metavar="OURS=THEIRS")
    p.add_argument("--dtype", default="f32", choices=["f32", "f64", "bf16"])
    p.add_argument("--future-keys", default="mirrored", choices=["mirrored", "zero", "masked", "negated"])
    p.add_argument("--max-len", type=int, default=4096)
    p.add_argument("--kwargs", default="{}")
    p.add_argument("--name")
    a = p.parse_args(argv)
    mapping = dict(kv.split("=", 1) for kv in a.map)
    unknown = set(mapping) - set(NAMES)
    if unknown:
        raise SystemExit(f"--map: unknown parameter(s) {sorted(unknown)}; ours are {NAMES}")
    glue = Glue(load_class(a.module), mapping, a.dtype, a.max_len, json.loads(a.kwargs))
    fire_kit.serve(glue.build, name=a.name or f"appendix-e glue: {a.module}",
                   families=["fire", "edge", "fire-grad", "invalid"], dtypes=[a.dtype],
                   future_keys=a.future_keys)


if __name__ == "__main__":
    main()
