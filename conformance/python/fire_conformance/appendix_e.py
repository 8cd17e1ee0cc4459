"""Ready-made glue for FIRE modules shaped like the paper's Appendix E.

Such a module is constructed as ``Class(num_heads, mlp_width, init_c, init_L, eps)``, holds the
parameters ``mlp.0.weight``, ``mlp.0.bias``, ``mlp.2.weight``, ``mlp.2.bias``, ``c``, ``init_L``,
``L_multiplier``, and returns the bias of the positions ``0..T-1``. Point the harness at yours:

    fire-conformance run --impl "fire-conformance-appendix-e path/to/model.py:FIRE"
    fire-conformance run --impl "python3 -m fire_conformance.appendix_e path/to/model.py:FIRE"
    pytest --fire-impl path/to/model.py:FIRE

A Flax/JAX module of the same shape (``init``/``apply``) is handed to ``fire_conformance.jax_glue``.

How the module is called is found by introspecting its ``forward`` (or ``__call__``), or forced
with ``--call``. A ``forward(x)`` found by introspection is called with the ``x`` layout first and,
when that fails or returns a bias of another length, with ``hidden``, then ``scores``: which
dimension of ``x`` a module reads the length from is its calling convention, not a FIRE mistake,
and the values are checked in full either way.

    x          forward(x), x of shape [1, H, T, 1]; the length is read from x (Appendix E)
    hidden     forward(x), x of shape [1, T, 1]: hidden states [batch, seq, dim], the length
               read from x.size(1) (GPT-style copies of Appendix E)
    scores     forward(x), x the zero attention scores [1, H, T, T] (a module that returns
               scores + bias, or reads the length from x.size(-1))
    seq_len    forward(T)                 (also ``seq_length``, ``length``, ``n``, ...)
    seq_len_device  forward(T, device)
    positions  forward(positions), positions = arange(T)
    qk         forward(query_positions, key_positions): the requested rows and columns directly

Outputs ``[H, T, T]``, ``[1, H, T, T]`` and ``[B, H, T, T]`` (every batch entry equal) are
accepted; anything else is a clear error naming the shape.

A torch module with more hidden layers (Appendix B's approximator has two: ``mlp.0``, ``mlp.2``,
``mlp.4``, ReLU between) is graded on the cases of its own depth; a case whose MLP the module
does not have is skipped with both architectures named. (A NumPy module cannot say its depth and
gets Appendix E's one hidden layer only.)

A torch module's state need not be Appendix E's exactly (``load_torch``): the case's MLP layers go,
in order, to the module's ``mlp.N`` layers or else its ``nn.Linear`` layers, so a layer built with
``bias=False`` or a dropped activation is graded (and named) rather than refused; scalars kept as
``[1]`` take the case's values; buffers the case has no value for keep the constructor's; a
parameter no case value reaches is refused by name. ``--dtype bf16`` casts it to ``bfloat16``.
What the module writes to standard output goes to standard error: the protocol owns stdout.

Options (after the module spec):
    --map OURS=THEIRS   rename a parameter (repeatable), e.g. --map L_multiplier=L_mult
    --dtype f32|f64|bf16  the dtype your module computes in (default f32; selects the tolerance)
    --call STYLE        how to call forward (see above; default: introspection)
    --future-keys X     mirrored (Appendix E, default), zero, masked (-inf or any value <= -1e3,
                        e.g. finfo.min) or negated (nothing checked above the diagonal)
    --max-len N         the largest T x T square to evaluate (default 4096); larger cases skip
    --kwargs JSON       extra constructor keyword arguments

With torch installed the module is a torch ``nn.Module`` (put in ``.eval()`` mode) and gradients
(``fire-grad/``) come from autograd; without torch, a NumPy module with the same interface
(``load_state_dict`` taking arrays) works for bias cases.
"""

import argparse
import importlib.util
import inspect
import json
import os
import re
import sys

import numpy as np

from fire_conformance import kit as fire_kit

try:
    import torch
except ImportError:  # the glue still serves NumPy modules
    torch = None

NAMES = ["mlp.0.weight", "mlp.0.bias", "mlp.2.weight", "mlp.2.bias", "c", "init_L", "L_multiplier"]
CALLS = ["x", "hidden", "scores", "seq_len", "seq_len_device", "positions", "qk"]
# The layouts of x a ``forward(x)`` found by introspection is tried with, in this order.
X_LAYOUTS = ["x", "hidden", "scores"]
LENGTH_NAMES = {"seq_len", "seq_length", "seqlen", "length", "len", "n", "t", "num_positions", "size"}
POSITION_NAMES = {"positions", "position", "pos", "position_ids", "positions_ids", "idx", "indices"}


def load_class(spec):
    path, _, cls = spec.rpartition(":")
    if not path or not cls:
        raise SystemExit(f"expected path/to/file.py:ClassName, got {spec!r}")
    if not os.path.exists(path):
        raise SystemExit(f"module file not found: {path}")
    mod_spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
    module = importlib.util.module_from_spec(mod_spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    mod_spec.loader.exec_module(module)
    if not hasattr(module, cls):
        raise SystemExit(f"{path} has no class {cls!r}")
    return getattr(module, cls)


def call_style(m):
    """How to call the module, from the names of its forward's parameters."""
    fn = m.forward if hasattr(m, "forward") else m.__call__
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return "x"
    names = [p.name.lower() for p in params]
    if len(names) >= 2 and names[1] == "device" and names[0] in LENGTH_NAMES:
        return "seq_len_device"
    if names and names[0] in LENGTH_NAMES:
        return "seq_len"
    if len(names) >= 2 and all(n in POSITION_NAMES or "pos" in n for n in names[:2]) \
            and ("q" in names[0] or "query" in names[0]):
        return "qk"
    if names and names[0] in POSITION_NAMES:
        return "positions"
    return "x"


def appendix_params(enc, any_depth=False):
    """(heads, width, our parameters by name) of a case's encoding, or Skip when it is not
    Appendix E's architecture: one ReLU hidden layer or, with ``any_depth``, any number of them
    (Appendix B's approximator has two), named as ``nn.Sequential`` numbers them
    (``mlp.0``, ``mlp.2``, ``mlp.4``, …; spec [fire.mlp])."""
    if enc["type"] != "fire":
        raise fire_kit.Skip(f"encoding `{enc['type']}`: this glue drives one Appendix E module")
    mlp = enc["mlp"]
    depth_ok = len(mlp["layers"]) >= 2 if any_depth else len(mlp["layers"]) == 2
    if (not depth_ok or mlp["activation"] != "relu" or mlp.get("final_activation")
            or enc["transform"] != "log" or enc["threshold"] == "disabled"):
        raise fire_kit.Skip("not Appendix E's architecture (one ReLU hidden layer, log, a threshold)")
    ours = {}
    for n, layer in enumerate(mlp["layers"]):
        ours[f"mlp.{2 * n}.weight"] = layer["weight"].array()
        ours[f"mlp.{2 * n}.bias"] = layer["bias"].array()
    ours.update({"c": np.array(enc["c"]), "init_L": np.array(enc["l_init"]),
                 "L_multiplier": np.array(enc["l_multiplier"])})
    last = 2 * (len(mlp["layers"]) - 1)
    return ours[f"mlp.{last}.weight"].shape[0], ours["mlp.0.weight"].shape[0], ours


def is_chain(shapes):
    """Whether ``[out, in]`` layer shapes compose into an MLP of one scalar input."""
    return bool(shapes) and all(len(s) == 2 for s in shapes) and shapes[0][1] == 1 and all(
        s[1] == p[0] for p, s in zip(shapes, shapes[1:]))


def chain_order(layers, shape):
    """``layers`` in the order their ``[out, in]`` shapes (``shape(layer)``) compose from one
    scalar input: the given order (creation order, for torch and Flax) when that composes, else
    the first order that does, taking the given order's layers as early as they fit. Several
    orders compose only when hidden layers share a width; then the given order decides among
    them. When none composes the given order stands, and the shapes are reported as they are.
    So a module that builds its output layer before its input layer is graded all the same."""
    layers = list(layers)

    def extend(order, rest, want):
        if not rest:
            return order
        for k in rest:
            if len(shape(k)) == 2 and shape(k)[1] == want:
                found = extend(order + [k], [r for r in rest if r is not k], shape(k)[0])
                if found is not None:
                    return found
        return None

    if is_chain([shape(k) for k in layers]):
        return layers
    return extend([], layers, 1) or layers


def is_our_name(name):
    """One of our parameter names: Appendix E's, or a deeper layer's ``mlp.N.weight|bias``."""
    return name in NAMES or re.fullmatch(r"mlp\.\d+\.(weight|bias)", name) is not None


def torch_layers(m, state, mapping):
    """The torch module's MLP layers, first to last, as ``(weight name, bias name or None)`` in its
    state dict: the layers named like ours (``mlp.N.weight``, directly or through ``--map``) when
    it has such, in the order of N, else its ``nn.Linear`` layers in the order their shapes
    compose (the order it registers them where several do; ``chain_order``).
    The case's layers go to these by position, not by number: ``nn.Sequential`` numbers its
    activations too, so a module that drops one has ``mlp.0``, ``mlp.1``. A layer built with
    ``bias=False`` has None."""
    back = {v: k for k, v in mapping.items()}
    named = []
    for k in state:
        hit = re.fullmatch(r"mlp\.(\d+)\.weight", back.get(k, k))
        if hit:
            named.append((int(hit.group(1)), k))
    if named:
        bias = lambda n: mapping.get(f"mlp.{n}.bias", f"mlp.{n}.bias")  # noqa: E731
        return [(k, bias(n) if bias(n) in state else None) for n, k in sorted(named)]
    linear = [(f"{name}.weight", f"{name}.bias" if mod.bias is not None else None)
              for name, mod in m.named_modules() if isinstance(mod, torch.nn.Linear)]
    hidden = [w for w, _ in linear if w not in state]
    if hidden:
        raise ParamsMismatch(f"the module's nn.Linear weight(s) {hidden} are not in its state dict "
                             "under those names (a parametrised weight: weight_norm, spectral_norm?); "
                             "write a build(case) glue that loads them")
    shapes = dict((w, tuple(state[w].shape)) for w, _ in linear)
    return chain_order(linear, lambda layer: shapes[layer[0]])


class Built:
    """How the glue built a module: the architecture it asked for, and whether the constructor
    names ``num_heads`` and ``mlp_width`` among its parameters, so claims to build what it is
    given (one that takes them through ``**kwargs`` may have one architecture by design)."""

    def __init__(self, cls, heads, width):
        self.text = f"built with num_heads={heads}, mlp_width={width}"
        try:
            params = inspect.signature(cls).parameters
        except (TypeError, ValueError):
            params = {}
        self.claims = "num_heads" in params and "mlp_width" in params

    def __str__(self):
        return self.text


class ParamsMismatch(ValueError):
    """The module's parameters cannot take the case's values (a name or a shape the glue cannot
    reach): no layout of x changes that, so it is said at once, not after trying each."""


def assign_layers(ours, layers, own, missing, built):
    """The case's MLP layers given, first to last, to the module's ``layers`` (``(weight name,
    bias name or None)`` in the module's own naming, ``own`` their ``[out, in]`` shapes), as
    ``{the module's name: ours}``: by position, not by number, and a layer without a bias
    leaves the case's bias out — exactly the catalogue's ``*-bias-missing`` mistakes, graded.
    ``missing`` is the error when the module has no layer. A case whose layers do not compose
    is an invalid case ([num.errors]), which the module could not hold: refused. A case whose
    MLP has another depth than the module's is not for this module: skipped, not failed. One of
    the module's depth whose widths differ was asked of a constructor that names ``num_heads``
    and ``mlp_width`` and ignored them (``built``, a ``Built``): refused, since skipping would
    leave every case of another architecture ungraded (a hard-coded ε among them); a
    constructor that does not name them is skipped as another depth is."""
    depth = sum(1 for k in ours if re.fullmatch(r"mlp\.\d+\.weight", k))
    ours_layers = [(f"mlp.{2 * n}.weight", f"mlp.{2 * n}.bias") for n in range(depth)]
    want = [tuple(np.shape(ours[w])) for w, _ in ours_layers]
    if not own:
        raise ValueError(missing)
    if any(len(s) != 2 for s in own):
        raise ParamsMismatch(f"the module's MLP layers have shapes {[list(s) for s in own]}, not "
                             "[out, in] matrices (a 1×1 convolution?); write a build(case) glue "
                             "that loads them")
    if not is_chain(want):
        raise ValueError(f"the case's MLP layers {[list(s) for s in want]} do not compose")
    if own != want and len(own) == len(want) and is_chain(own) and built.claims:
        raise ParamsMismatch(f"the module was built for the case's MLP, {describe(want)} ({built}), "
                             f"but its layers are {describe(own)}: its constructor ignores num_heads "
                             "or mlp_width; honour them, or write a build(case) glue that skips "
                             "what the module cannot build")
    if own != want:
        raise fire_kit.Skip(f"the case's MLP is {describe(want)}, this module's "
                            f"{describe(own)} ({built})")
    loaded = {}
    for (w, b), (their_w, their_b) in zip(ours_layers, layers):
        loaded[their_w] = w
        if their_b is not None:
            loaded[their_b] = b
    return loaded


def load_torch(m, ours, mapping, dt, built):
    """Loads the case's parameters ``ours`` into the torch module ``m`` (already in ``dt``) and
    returns ``{the module's name: ours}`` of what it loaded.

    Layer by layer rather than one strict ``load_state_dict``: the catalogue's MLP mistakes
    (spec/variants.md) are modules whose state a strict load refuses. A layer built with
    ``bias=False`` takes the weight and leaves the case's bias out, which is exactly the mistake
    (``hidden-bias-missing``, ``output-bias-missing``), graded and named like any other; a
    dropped activation (``no-hidden-activation``) renumbers the layers, which go by position.
    Scalars stored as ``[1]`` take the case's ``[]`` values.
    Buffers the case has no value for (a table of positions) keep what the constructor made;
    ``init_L`` may be absent from the state, the constructor having taken it. Anything else is
    refused with the names: a case value with nowhere to go, or a module parameter no case
    value reaches."""
    state = m.state_dict()
    params = {n for n, _ in m.named_parameters()}
    for k, theirs in mapping.items():
        if theirs not in state:
            raise ParamsMismatch(f"--map {k}={theirs}: the module has no such parameter or buffer; "
                             f"it has {list(state)}")
    layers = torch_layers(m, state, mapping)
    own = [tuple(state[w].shape) for w, _ in layers]
    missing = ("the module has no MLP layer the glue can find (no nn.Linear, no parameter "
               f"named mlp.N.weight among {list(state)}); map them with --map mlp.0.weight=NAME, …")
    loaded = assign_layers(ours, layers, own, missing, built)
    for k in ("c", "init_L", "L_multiplier"):
        theirs = mapping.get(k, k)
        if theirs in state:
            loaded[theirs] = k
        elif k not in OPTIONAL_SCALARS or k in mapping:
            raise ParamsMismatch(f"the module has no parameter or buffer `{theirs}` for the case's `{k}` "
                             f"(it has {list(state)}); map it with --map {k}=NAME")
    if "L_multiplier" not in loaded.values():
        trained = {n for n, p in m.named_parameters() if p.requires_grad}
        no_multiplier(mapping.get("init_L", "init_L") in trained,
                      [n for n in state if n not in loaded and state[n].numel() <= 1])
    unset = [n for n in state if n in params and n not in loaded]
    if unset:
        raise ParamsMismatch(f"the module's parameter(s) {unset} take none of the case's values "
                             f"({sorted(ours)}); map them with --map OURS=THEIRS, or write a "
                             "build(case) glue (one that converts, where the module stores a value "
                             "otherwise: log L, softplus⁻¹ c)")
    values = {}
    for theirs, k in loaded.items():
        v = torch.as_tensor(ours[k], dtype=dt)
        shape = tuple(state[theirs].shape)
        if tuple(v.shape) != shape:
            if v.dim() <= 1 and len(shape) <= 1 and v.numel() == int(np.prod(shape)):
                v = v.reshape(shape)
            else:
                raise ValueError(f"the case's `{k}` has shape {list(v.shape)}, the module's "
                                 f"`{theirs}` {list(shape)}")
        values[theirs] = v
    m.load_state_dict(values, strict=False)
    return loaded


# Scalars a module may lack: `init_L`, taken by the constructor; `L_multiplier`, whose absence
# is the catalogue's `multiplier-ignored` (L = L_init), graded and named rather than refused.
OPTIONAL_SCALARS = ("init_L", "L_multiplier")


def no_multiplier(init_l_trained, scalars, how="map it with --map L_multiplier=NAME"):
    """For a module without ``L_multiplier``, graded as the catalogue's ``multiplier-ignored``
    (L = L_init) only where nothing else could be the multiplier: a module that learns L
    directly (``init_L`` trainable) is a reparametrisation, and a scalar no case value reaches
    (a buffer ``L_mult``) may be the multiplier under another name; both are refused by name,
    the latter saying ``how`` to reach it."""
    if init_l_trained:
        raise ParamsMismatch("the module has no `L_multiplier` and trains `init_L`: it learns L "
                             "directly, where [fire.threshold] learns m in L = |m·L_init|; write "
                             "a build(case) glue that loads L = |m·L_init| and sums the gradient")
    if scalars:
        raise ParamsMismatch(f"the module has no `L_multiplier`, and its scalar(s) {scalars} take "
                             f"none of the case's values: if one is the threshold's multiplier, {how}; "
                             "a module without one computes L = L_init (the catalogue's "
                             "multiplier-ignored)")


# The torch dtype of each --dtype: what the module is cast to, and what it must return.
TORCH_DTYPES = {"f64": "float64", "f32": "float32", "bf16": "bfloat16"}


def dtype_name(dt):
    """A torch, NumPy or JAX dtype's name without its library: ``float32``."""
    return str(dt).rsplit(".", 1)[-1]


def wider_than_bf16(dtype, got):
    """Whether a module asked for bf16 returned float32 or float64: a mixed-precision module
    (autocast style: bf16 products, f32 accumulation or output) is graded by the bf16 profile
    all the same, since the tolerance comes from --dtype and a wider output hides nothing."""
    return dtype == "bf16" and dtype_name(got) in ("float32", "float64")


class Glue:
    def __init__(self, cls, mapping, dtype, max_len, kwargs, call):
        self.cls, self.mapping, self.dtype, self.max_len, self.kwargs = cls, mapping, dtype, max_len, kwargs
        self.call = call
        # The x layout that gave a bias of the right length where the layouts disagree
        # (T != H): tried first from then on.
        self.layout = None

    def params(self, enc):
        # Any depth for a torch module, whose own layers say which cases it can take
        # (`module`); a NumPy module says nothing of its depth, so it gets Appendix E's only.
        any_depth = torch is not None and isinstance(self.cls, type) and issubclass(self.cls, torch.nn.Module)
        return appendix_params(enc, any_depth=any_depth)

    def module(self, case):
        enc = case.encoding
        heads, width, ours = self.params(enc)
        m = construct(self.cls, heads, width, enc, self.kwargs)
        if torch is not None and isinstance(m, torch.nn.Module):
            # The whole module in the dtype asked, bf16 included: a bf16 module computes and
            # returns bfloat16, graded by the bf16 profile [num.profiles].
            dt = getattr(torch, TORCH_DTYPES[self.dtype])
            m = m.to(dt)
            names = load_torch(m, ours, self.mapping, dt, Built(self.cls, heads, width))
            m.eval()
        else:
            # NumPy has no bfloat16: a NumPy module asked for bf16 computes in float32.
            dt = np.float64 if self.dtype == "f64" else np.float32
            names = {self.mapping.get(k, k): k for k in ours}
            m.load_state_dict({k: np.asarray(ours[v], dtype=dt) for k, v in names.items()})
        return m, heads, names, ours

    def forward(self, m, heads, case, torch_module):
        """The module's bias over what it was asked: ([H, R, C] array-like, gathered?)."""
        style = self.call or call_style(m)
        T = case.length
        if style != "qk" and T > self.max_len:
            raise fire_kit.Skip(f"needs a {T} x {T} square (> --max-len {self.max_len})")
        if torch_module:
            dt = next(m.parameters()).dtype
            dev = next(m.parameters()).device
            arange = lambda n: torch.arange(n, device=dev)  # noqa: E731
            tensor = lambda v: torch.as_tensor(v, device=dev)  # noqa: E731
            zeros = lambda shape: torch.zeros(shape, dtype=dt, device=dev)  # noqa: E731
        else:
            dev = "cpu"
            arange, tensor, zeros = np.arange, np.asarray, np.zeros
        rows, cols = (len(case.queries), len(case.keys)) if style == "qk" else (T, T)

        def call(style):
            try:
                if style == "x":
                    out = m(zeros((1, heads, T, 1)))
                elif style == "hidden":
                    out = m(zeros((1, T, 1)))
                elif style == "scores":
                    out = m(zeros((1, heads, T, T)))
                elif style == "seq_len":
                    out = m(T)
                elif style == "seq_len_device":
                    out = m(T, dev)
                elif style == "positions":
                    out = m(arange(T))
                elif style == "qk":
                    out = m(tensor(case.queries), tensor(case.keys))
                else:
                    raise SystemExit(f"unknown --call {style!r}; one of {CALLS}")
            except (RuntimeError, TypeError) as e:
                text = str(e)
                if torch_module and any(w in text for w in ("Double", "Float", "dtype", "scalar type")):
                    raise fire_kit.UnsupportedDtype(f"the module cannot compute in {self.dtype} ({type(e).__name__}: "
                                        f"{text.splitlines()[0]}); rerun with the --dtype it computes in")
                raise
            return squeeze(out, heads, rows, cols)

        if style != "x" or self.call:
            return call(style), style == "qk"
        # forward(x) by introspection: the layouts in turn, the one that worked before first.
        order = sorted(X_LAYOUTS, key=lambda s: s != self.layout)
        errors = []
        for layout in order:
            try:
                full = call(layout)
            except NotABias:
                raise
            except (ValueError, RuntimeError, TypeError, IndexError) as e:
                errors.append((layout, e))
                continue
            if T != heads:
                self.layout = layout
            return full, False
        raise every_layout_failed(errors)

    def build(self, case):
        case.check_positions()
        if case.kind not in ("bias", "vjp"):
            raise fire_kit.Skip(f"kind `{case.kind}`: the module returns the bias only")
        m, heads, names, ours = self.module(case)
        torch_module = torch is not None and isinstance(m, torch.nn.Module)
        cot = None
        if case.kind == "vjp":
            if not torch_module:
                raise fire_kit.Skip("gradients need a torch module")
            cot = case.inputs["cotangent"].array()
            want = (heads, len(case.queries), len(case.keys))
            if cot.shape != want:
                raise ValueError(f"the cotangent has shape {list(cot.shape)}, the bias {list(want)}")
        if torch_module and case.kind == "bias":
            with torch.no_grad():
                full, direct = self.forward(m, heads, case, True)
        else:
            full, direct = self.forward(m, heads, case, torch_module)
        if torch_module and not isinstance(full, torch.Tensor):
            # A torch module handing back a NumPy array (a `.numpy()` at the end of forward):
            # its bias is graded as it is; autograd cannot reach through it.
            if case.kind == "vjp":
                raise fire_kit.Skip("the module returns a NumPy array, which autograd cannot "
                                    "differentiate: no gradients")
            torch_module = False
        want_dt = (TORCH_DTYPES[self.dtype] if torch_module
                   else {"f64": "float64", "f32": "float32"}.get(self.dtype))
        got_dt = full.dtype if torch_module else np.asarray(full).dtype
        if want_dt is not None and dtype_name(got_dt) != want_dt and not wider_than_bf16(self.dtype, got_dt):
            raise fire_kit.UnsupportedDtype(f"the module returns {got_dt} but --dtype {self.dtype} was "
                                            "given; rerun with the --dtype it computes in")
        if case.kind == "bias":
            if torch_module:
                full = full.detach().cpu().double().numpy()
            return np.asarray(full) if direct else case.gather(full)
        g = torch.zeros(full.shape, dtype=full.dtype, device=full.device)
        c = torch.as_tensor(cot, dtype=full.dtype, device=full.device)
        for qi, i in enumerate(case.queries):
            for ki, j in enumerate(case.keys):
                r, k = (qi, ki) if direct else (i, j)
                g[:, r, k] += c[:, qi, ki]
        (full * g).sum().backward()
        # Every trainable parameter's gradient under our name, in the case's shape (a scalar the
        # module keeps as [1] has a gradient of [1]). A module that trains `init_L`, which
        # [grad.layout] freezes, sends that gradient too, unasked for: the reply shows it. A
        # layer built without a bias sends none for it, and the case fails on the missing output.
        grads = {names[n]: p.grad for n, p in m.named_parameters() if p.requires_grad and n in names}
        if case.encoding["threshold"] != "learnable":
            grads.pop("L_multiplier", None)
        return {k: torch.zeros(np.shape(ours[k])) if v is None else v.reshape(np.shape(ours[k]))
                for k, v in grads.items()}


# What each layout of x is, for the error that names them all.
X_SHAPES = {"x": "[1, H, T, 1]", "hidden": "[1, T, 1]", "scores": "[1, H, T, T]"}


def construct(cls, heads, width, enc, kwargs):
    """The module, constructed as Appendix E's is (``num_heads``, ``mlp_width``, ``init_c``,
    ``init_L``, ``eps``) plus ``--kwargs``. A constructor whose signature is not Appendix E's
    fails the same way on every case; the error says how to reach it rather than leave a bare
    TypeError to every reply."""
    try:
        return cls(num_heads=heads, mlp_width=width, init_c=enc["c"], init_L=enc["l_init"],
                   eps=enc["eps"], **kwargs)
    except TypeError as e:
        if "unexpected keyword" in str(e):
            how = ("its constructor names its arguments otherwise, which --kwargs cannot rename: "
                   "write a build(case) glue that constructs it (conformance/README.md)")
        else:
            how = "pass other required arguments with --kwargs JSON, or write a build(case) glue"
        raise TypeError(f"{e} (the glue constructs the module as Appendix E does: num_heads, "
                        f"mlp_width, init_c, init_L, eps; {how})") from e


def every_layout_failed(errors):
    """The error for a ``forward(x)`` that failed with every layout of x: each attempt's error
    (once, where all are the same), the first's type (a ``ValueError`` where that type cannot
    take a message). An error about the call's arguments is the signature, not the layout."""
    first = errors[0][1]
    said = [f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}" for _, e in errors]
    if len(set(said)) == 1:
        tried = f"the same with x as each of {', '.join(X_SHAPES[s] for s, _ in errors)}: {said[0]}"
    else:
        tried = "; ".join(f"x as {X_SHAPES[s]}: {w}" for (s, _), w in zip(errors, said))
    signature = isinstance(first, TypeError) and any(
        w in str(first) for w in ("positional argument", "unexpected keyword"))
    how = (f"forward takes none of the calls the glue knows (--call {'|'.join(CALLS)}): write a "
           "build(case) glue" if signature else "force one with --call, or write a build(case) glue")
    text = f"forward(x) failed with every layout of x ({tried}); {how}"
    try:
        err = type(first)(text)
    except Exception:  # an exception type with a constructor of its own
        err = ValueError(text)
    err.__cause__ = first
    return err


class NotABias(TypeError):
    """The module returned something other than one array (a tuple, a dict): no layout of x
    changes that, so it is said at once, not after trying each."""


def squeeze(out, heads, rows, cols):
    """[H, R, C] from [H, R, C], [1, H, R, C] or [B, H, R, C] with equal batch entries."""
    if not hasattr(out, "shape"):
        what = type(out).__name__
        if isinstance(out, (tuple, list)):
            what = f"a {what} of {len(out)}"
        elif isinstance(out, dict):
            what = f"a dict with keys {list(out)}"
        else:
            what = f"a {what}"
        raise NotABias(f"forward returned {what}; the glue expects the bias tensor alone: write a "
                       "build(case) glue that picks it out (--fire-glue, fire-conformance-glue)")
    shape = tuple(out.shape)
    if len(shape) == 3 and shape == (heads, rows, cols):
        return out
    if len(shape) == 4 and shape[1:] == (heads, rows, cols):
        first = out[0]
        for b in range(1, shape[0]):
            same = (out[b] == first).all()
            if not bool(same):
                raise ValueError(f"the module's output {list(shape)} differs between batch entries")
        return first
    raise ValueError(f"the module returned shape {list(shape)}; expected [H, T, T], [1, H, T, T] or "
                     f"[B, H, T, T] with H = {heads}, T = {rows}" + ("" if rows == cols else f" x {cols}"))


def parser(description=__doc__):
    """The command line shared by this glue and ``jax_glue``."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("module", help="path/to/file.py:ClassName")
    p.add_argument("--map", action="append", default=[], metavar="OURS=THEIRS")
    p.add_argument("--dtype", default="f32", choices=["f32", "f64", "bf16"])
    p.add_argument("--call", choices=CALLS, help="how to call forward (default: introspection)")
    p.add_argument("--future-keys", default="mirrored", choices=["mirrored", "zero", "masked", "negated"])
    p.add_argument("--max-len", type=int, default=4096)
    p.add_argument("--kwargs", default="{}")
    p.add_argument("--name")
    return p


def describe(shapes):
    """An MLP's ``[out, in]`` layer shapes as ``1 → 32 → 32 → 12``; shapes that do not compose
    from one input as they are, first to last."""
    if not shapes:
        return "empty"
    if not is_chain(shapes):
        return "layers of [out, in] shapes " + ", ".join(str(list(s)) for s in shapes) + \
            ", which do not compose from one input"
    return " → ".join(str(n) for n in [shapes[0][1]] + [s[0] for s in shapes])


def parse_map(pairs, known=is_our_name):
    """``--map OURS=THEIRS`` pairs as a dict, rejecting unknown names of ours (``known``: a
    predicate, or a list of names)."""
    try:
        mapping = dict(kv.split("=", 1) for kv in pairs)
    except ValueError:
        raise SystemExit("--map takes OURS=THEIRS")
    ok = known if callable(known) else set(known).__contains__
    unknown = sorted(k for k in mapping if not ok(k))
    if unknown:
        raise SystemExit(f"--map: unknown parameter(s) {unknown}; ours are {NAMES} "
                         "and, for deeper MLPs, mlp.4.weight, mlp.4.bias, …")
    return mapping


def is_jax_module(cls):
    """Flax linen's interface (``init`` and ``apply``), which a torch module does not have."""
    if torch is not None and isinstance(cls, type) and issubclass(cls, torch.nn.Module):
        return False
    return callable(getattr(cls, "init", None)) and callable(getattr(cls, "apply", None))


def main(argv=None):
    a = parser().parse_args(argv)
    mapping = parse_map(a.map)
    # Before the module is imported: a print there or in its forward would be read as a reply.
    fire_kit.reserve_stdout()
    cls = load_class(a.module)
    if is_jax_module(cls):
        from fire_conformance import jax_glue

        return jax_glue.serve(cls, a)
    glue = Glue(cls, mapping, a.dtype, a.max_len, json.loads(a.kwargs), a.call)
    fire_kit.serve(glue.build, name=a.name or f"appendix-e glue: {a.module}",
                   families=["fire", "edge", "fire-grad", "invalid"], dtypes=[a.dtype],
                   future_keys=a.future_keys)


if __name__ == "__main__":
    main()
