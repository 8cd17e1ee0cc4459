"""Ready glue for a Flax/JAX FIRE shaped like the paper's Appendix E, gradients through ``jax.vjp``.

The module has Flax linen's interface: a class constructed as
``Class(num_heads=, mlp_width=, init_c=, init_L=, eps=)`` whose instances have
``init(rng, *args) -> variables`` and ``apply(variables, *args) -> bias``, the bias of the positions
``0..T-1`` as ``[H, T, T]``, ``[1, H, T, T]`` or ``[B, H, T, T]``. A ``flax.linen.Module`` is
exactly that; so is a plain-JAX class with those two methods (``examples/jax_fire.py``).

    fire-conformance run --impl "fire-conformance-jax path/to/flax_fire.py:FIRE"
    pytest --fire-impl path/to/flax_fire.py:FIRE        # the Appendix E glue hands JAX modules here

How it is called (``x``, ``hidden``, ``scores``, ``seq_len``, ``positions``, ``qk``) is read from
``__call__``'s parameters as in ``appendix_e``, or forced with ``--call``; an introspected
``__call__(x)`` is tried with x as ``[1, H, T, 1]``, ``[1, T, 1]`` and ``[1, H, T, T]`` in turn, as
there. The parameters are found in the module's own
``params`` tree (from ``init``): the leaves named ``c``, ``L_multiplier`` and, when it is a
parameter, ``init_L``; and the two ``Dense`` layers (``kernel``/``bias`` pairs, first layer first;
a ``kernel`` is ``[in, out]``, the transpose of PyTorch's ``weight``). Other layouts are mapped
with ``--map OURS=PATH``, PATH ``/``-separated in the tree, e.g.
``--map mlp.0.weight=mlp/layers_0/kernel --map L_multiplier=L_mult``. Variables outside
``params`` (an ``init_L`` constant, say) come from ``init`` with the case's constructor arguments.

Options are those of ``appendix_e`` (``--dtype f32|f64``, ``--call``, ``--future-keys``,
``--max-len``, ``--kwargs``). ``--dtype f64`` turns on ``jax_enable_x64``.
"""

import inspect
import json
import sys
import types

import numpy as np

from fire_conformance import appendix_e
from fire_conformance import kit as fire_kit

OURS = appendix_e.NAMES
SCALARS = ("c", "init_L", "L_multiplier")


def _jax():
    try:
        import jax
        import jax.numpy as jnp
    except ImportError as e:
        raise SystemExit(f"the JAX glue needs jax ({e}); install it with `pip install jax`")
    return jax, jnp


def _flatten(tree, prefix=()):
    """``{path tuple: leaf}`` of a nested mapping, in the tree's own order."""
    out = {}
    for k, v in tree.items():
        if hasattr(v, "items"):
            out.update(_flatten(v, prefix + (str(k),)))
        else:
            out[prefix + (str(k),)] = v
    return out


def _unflatten(flat):
    tree = {}
    for path, v in flat.items():
        node = tree
        for k in path[:-1]:
            node = node.setdefault(k, {})
        node[path[-1]] = v
    return tree


def find_params(flat, mapping):
    """Our parameter name -> path in the module's params tree, from ``--map`` and the leaf names."""
    paths = {name: tuple(p.split("/")) for name, p in mapping.items()}
    for name in SCALARS:
        if name not in paths:
            hits = [p for p in flat if p[-1] == name]
            if len(hits) == 1:
                paths[name] = hits[0]
    layers = []
    for p in flat:
        if p[-1] == "kernel" and p[:-1] + ("bias",) in flat and p[:-1] not in layers:
            layers.append(p[:-1])
    if len(layers) == 2:
        # Creation order, unless the shapes say otherwise: the first layer reads one scalar.
        if np.shape(flat[layers[0] + ("kernel",)])[0] != 1 and np.shape(flat[layers[1] + ("kernel",)])[0] == 1:
            layers.reverse()
        for ours, layer in (("mlp.0", layers[0]), ("mlp.2", layers[1])):
            paths.setdefault(f"{ours}.weight", layer + ("kernel",))
            paths.setdefault(f"{ours}.bias", layer + ("bias",))
    for name, p in paths.items():
        if p not in flat:
            raise ValueError(f"--map {name}={'/'.join(p)}: no such parameter; the module's are "
                             f"{['/'.join(q) for q in flat]}")
    missing = [n for n in OURS if n not in paths and n != "init_L"]
    if missing:
        raise ValueError(f"cannot find {missing} among the module's parameters "
                         f"{['/'.join(q) for q in flat]}; map them with --map OURS=PATH")
    return paths


def _place(value, leaf, path):
    """Our array in the module's layout: a ``kernel`` is transposed; shapes must then agree."""
    value = np.asarray(value)
    if path[-1] == "kernel":
        value = value.T
    want = tuple(np.shape(leaf))
    if value.shape != want:
        if value.size == int(np.prod(want)) and value.ndim <= 1 and len(want) <= 1:
            value = value.reshape(want)
        else:
            raise ValueError(f"parameter {'/'.join(path)} has shape {list(want)} in the module, "
                             f"ours is {list(value.shape)}")
    return value


def call_style(m):
    """As ``appendix_e.call_style``, from ``__call__`` (Flax) or else ``apply`` less its
    ``variables`` parameter (a plain-JAX class with linen's interface)."""
    if callable(m):
        return appendix_e.call_style(m)
    sig = inspect.signature(m.apply)

    def forward(*args):
        raise NotImplementedError

    forward.__signature__ = sig.replace(parameters=list(sig.parameters.values())[1:])
    return appendix_e.call_style(types.SimpleNamespace(forward=forward))


class JaxGlue:
    def __init__(self, cls, mapping, dtype, max_len, kwargs, call):
        self.jax, self.jnp = _jax()
        if dtype == "f64":
            self.jax.config.update("jax_enable_x64", True)
        self.cls, self.mapping, self.dtype, self.max_len = cls, mapping, dtype, max_len
        self.kwargs, self.call = kwargs, call
        # As in appendix_e.Glue: the x layout that worked where the layouts disagree (T != H).
        self.layout = None
        self.dt = {"f64": self.jnp.float64, "f32": self.jnp.float32, "bf16": self.jnp.bfloat16}[dtype]

    def layouts(self, m):
        """The call styles to try in turn: one, or for an introspected ``__call__(x)`` the x
        layouts of ``appendix_e.X_LAYOUTS``, the one that worked before first."""
        style = self.call or call_style(m)
        if style != "x" or self.call:
            return [style]
        return sorted(appendix_e.X_LAYOUTS, key=lambda s: s != self.layout)

    def args(self, style, heads, case):
        """The call's arguments and whether they ask for the requested rows and columns directly."""
        jnp = self.jnp
        T = case.length
        if style != "qk" and T > self.max_len:
            raise fire_kit.Skip(f"needs a {T} x {T} square (> --max-len {self.max_len})")
        if style == "x":
            return (jnp.zeros((1, heads, T, 1), dtype=self.dt),), False
        if style == "hidden":
            return (jnp.zeros((1, T, 1), dtype=self.dt),), False
        if style == "scores":
            return (jnp.zeros((1, heads, T, T), dtype=self.dt),), False
        if style in ("seq_len", "seq_len_device"):
            return ((T, None) if style == "seq_len_device" else (T,)), False
        if style == "positions":
            return (jnp.arange(T),), False
        if style == "qk":
            return (jnp.asarray(case.queries), jnp.asarray(case.keys)), True
        raise SystemExit(f"unknown --call {style!r}; one of {appendix_e.CALLS}")

    def build(self, case):
        case.check_positions()
        if case.kind not in ("bias", "vjp"):
            raise fire_kit.Skip(f"kind `{case.kind}`: the module returns the bias only")
        enc = case.encoding
        heads, width, ours = appendix_e.appendix_params(enc)
        m = self.cls(num_heads=heads, mlp_width=width, init_c=enc["c"], init_L=enc["l_init"],
                     eps=enc["eps"], **self.kwargs)
        styles = self.layouts(m)
        errors = []
        for style in styles:
            args, direct = self.args(style, heads, case)
            try:
                out = self.evaluate(m, heads, case, ours, args, direct)
            except appendix_e.NotABias:
                raise
            except (ValueError, RuntimeError, TypeError, IndexError) as e:
                if len(styles) == 1:
                    raise
                errors.append((style, e))
                continue
            if case.length != heads:
                self.layout = style
            return out
        raise appendix_e.every_layout_failed(errors)

    def evaluate(self, m, heads, case, ours, args, direct):
        """The case's output from ``m`` called with ``args``."""
        jax, jnp = self.jax, self.jnp
        variables = dict(m.init(jax.random.PRNGKey(0), *args))
        flat = _flatten(variables.get("params", {}))
        paths = find_params(flat, self.mapping)
        for name, path in paths.items():
            flat[path] = jnp.asarray(_place(ours[name], flat[path], path), dtype=self.dt)
        params = _unflatten(flat)
        rows, cols = (len(case.queries), len(case.keys)) if direct else (case.length, case.length)

        def bias(p):
            out = m.apply({**variables, "params": p}, *args)
            return appendix_e.squeeze(out, heads, rows, cols)

        if case.kind == "bias":
            full = bias(params)
        else:
            cot = case.inputs["cotangent"].array()
            want = (heads, len(case.queries), len(case.keys))
            if cot.shape != want:
                raise ValueError(f"the cotangent has shape {list(cot.shape)}, the bias {list(want)}")
            full, pullback = jax.vjp(bias, params)
        if full.dtype != self.dt:
            raise fire_kit.Skip(f"the module returns {full.dtype} but --dtype {self.dtype} was given; "
                                "rerun with the --dtype it computes in")
        if case.kind == "bias":
            full = np.asarray(full, dtype=np.float64)
            return full if direct else case.gather(full)
        g = np.zeros(full.shape, dtype=np.float64)
        if direct:
            g += cot
        else:
            # Repeated positions add up, as they do in the sum the cotangent defines.
            np.add.at(g, (slice(None), np.asarray(case.queries)[:, None], np.asarray(case.keys)[None, :]), cot)
        (grads,) = pullback(jnp.asarray(g, dtype=full.dtype))
        gflat = _flatten(grads)
        out = {}
        for name in case.outputs:
            if name not in paths:
                raise ValueError(f"the gradient of `{name}` is asked for, and the module has no such parameter")
            g_leaf = np.asarray(gflat[paths[name]], dtype=np.float64)
            if paths[name][-1] == "kernel":
                g_leaf = g_leaf.T
            out[name] = g_leaf.reshape(np.shape(ours[name]))
        return out


def serve(cls, a):
    """Serves ``cls`` with the options ``a`` parsed by ``appendix_e.parser``."""
    mapping = appendix_e.parse_map(a.map)
    glue = JaxGlue(cls, mapping, a.dtype, a.max_len, json.loads(a.kwargs), a.call)
    fire_kit.serve(glue.build, name=a.name or f"jax glue: {a.module}",
                   families=["fire", "edge", "fire-grad", "invalid"], dtypes=[a.dtype],
                   future_keys=a.future_keys)


def main(argv=None):
    a = appendix_e.parser(__doc__).parse_args(argv)
    appendix_e.parse_map(a.map)
    _jax()
    # Before the module is imported: a print there or in its __call__ would be read as a reply.
    fire_kit.reserve_stdout()
    return serve(appendix_e.load_class(a.module), a)


if __name__ == "__main__":
    sys.exit(main())
