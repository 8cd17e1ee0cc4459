"""fire_conformance.loading: how a case's FIRE parameters reach a third-party module's state,
for the Appendix E glue (torch state dicts) and the JAX glue (params trees) alike: the case's
parameters by Appendix E's names, the module's MLP layers in the order their shapes compose,
layer by layer (so the catalogue's MLP mistakes are graded, not refused), and what is refused by
name (a value with nowhere to go, a parameter no value reaches, a constructor that ignores the
architecture it is given, a multiplier kept under another name). spec: [fire.mlp], [grad.layout]
"""

import re

import numpy as np

from fire_conformance import construction
from fire_conformance import hand_written
from fire_conformance import kit as fire_kit
from fire_conformance.layers import (
    chain_order, is_chain, loose_biases, mapped_biases, unclaimed_vectors, vector_length)

try:
    import torch
except ImportError:  # NumPy and JAX modules need no torch
    torch = None

NAMES = ["mlp.0.weight", "mlp.0.bias", "mlp.2.weight", "mlp.2.bias", "c", "init_L", "L_multiplier"]


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


def is_our_name(name):
    """One of our parameter names: Appendix E's, or a deeper layer's ``mlp.N.weight|bias``."""
    return name in NAMES or re.fullmatch(r"mlp\.\d+\.(weight|bias)", name) is not None


def torch_layers(m, state, mapping):
    """The torch module's MLP layers, first to last, as ``(weight name, bias name or None)`` in its
    state dict: the layers named like ours (``mlp.N.weight``, directly or through ``--map``) when
    it has such, in the order of N, else its ``nn.Linear`` layers in the order their shapes
    compose (the order it registers them where several do; ``chain_order``), else its layers
    written as parameters (``hand_written.layers``).
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
    if not linear:
        # Layers written as parameters (``self.W1 = nn.Parameter(...)``), found by their names.
        claimed = set(mapping.values()) | set(construction.SCALARS)
        return hand_written.layers({n: tuple(state[n].shape) for n in trainable(m)
                                    if n in state and n not in claimed})
    hidden = [w for w, _ in linear if w not in state]
    if hidden:
        raise ParamsMismatch(f"the module's nn.Linear weight(s) {hidden} are not in its state dict "
                             "under those names (a weight a hook computes: the older "
                             "torch.nn.utils.weight_norm or spectral_norm, whose "
                             "torch.nn.utils.parametrizations versions the glue loads); "
                             "write a build(case) glue that loads them")
    shapes = dict((w, tuple(state[w].shape)) for w, _ in linear)
    return chain_order(linear, lambda layer: shapes[layer[0]])


class Built:
    """How the glue built a module: the architecture it asked for, and whether the constructor
    names ``num_heads`` and ``mlp_width`` among its parameters, so claims to build what it is
    given (one that takes them through ``**kwargs`` may have one architecture by design)."""

    def __init__(self, cls, heads, width, arguments):
        if arguments.config_of(cls) is not None:
            heads_as, width_as = (arguments.given_as(cls, a).removeprefix("config.") for a in construction.SHAPE_ARGS)
            self.text = f"built from a config with {heads_as}={heads}, {width_as}={width}"
        else:
            self.text = f"built with num_heads={heads}, mlp_width={width}"
        self.claims = arguments.claims_shape(cls)

    def __str__(self):
        return self.text


class ParamsMismatch(ValueError):
    """The module's parameters cannot take the case's values (a name or a shape the glue cannot
    reach): no layout of x changes that, so it is said at once, not after trying each."""


class ExtraLayer(fire_kit.Mistake, ParamsMismatch):
    """A layer after f_θ's output: a module that is not FIRE's, not one the glue cannot load."""


class IgnoresShape(fire_kit.Mistake, ParamsMismatch):
    """A module built with the case's number of heads and MLP width whose layers are of others:
    its constructor ignores them, where a model built with them would get another f_θ."""


class SharedAcrossHeads(fire_kit.Mistake, ParamsMismatch):
    """An f_θ with one output where FIRE's has one per head: a module that is not FIRE's."""


def assign_layers(ours, layers, own, missing, built, unordered=None):
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
        raise ParamsMismatch(missing)
    own = hand_written.first_layer(own)
    if any(len(s) != 2 for s in own):
        raise ParamsMismatch(f"the module's MLP layers have shapes {[list(s) for s in own]}, not "
                             "[out, in] matrices (a 1×1 convolution?); write a build(case) glue "
                             "that loads them")
    if not is_chain(want):
        raise ValueError(f"the case's MLP layers {[list(s) for s in want]} do not compose")
    heads, width = want[-1][0], want[0][0]
    if heads != width and is_chain(own) and len(own) >= 2 and own[-1] == (heads, heads) \
            and own[-2][0] == heads:
        # Built with distinct widths, the module ends in an H × H layer after its H outputs: a
        # layer f_θ does not have, whatever the depth asked (every case would skip or blame
        # the constructor).
        raise ExtraLayer(f"the module's layers are {describe(own)} ({built}): after the {heads}-wide "
                             f"output comes another layer ({heads} → {heads}, mixing the heads), which "
                             "FIRE's f_θ does not have [fire.mlp]; the bias is the MLP's output")
    if heads > 1 and len(own) == len(want) and is_chain(own) and own[-1] == (1, want[-1][1]) \
            and own[:-1] == want[:-1]:
        # Every layer as asked but the last, which has one output: the heads share one bias
        # function (told apart elsewhere, if at all: a threshold per head), where f_θ maps to
        # one value per head.
        raise SharedAcrossHeads(f"the module's f_θ is {describe(own)} ({built}), where FIRE's is "
                                f"{describe(want)}: one output shared by the {heads} heads, where "
                                "f_θ: ℝ → ℝ^H gives each head its own bias [fire.mlp]")
    if own != want and len(own) == len(want) and is_chain(own) and built.claims:
        raise IgnoresShape(f"the module was built for the case's MLP, {describe(want)} ({built}), "
                           f"but its layers are {describe(own)}: its constructor ignores num_heads "
                           "or mlp_width; honour them, or write a build(case) glue that skips "
                           "what the module cannot build")
    if not is_chain(own):
        # No case can be loaded, whatever its depth: a layer the glue did not recognise (a
        # weight under a name of its own) is missing from what it found. Refused, not skipped,
        # which would say of every case that it is another architecture.
        raise ParamsMismatch(f"the MLP layers the glue found in the module are {describe(own)} "
                             f"({built}): a layer it did not recognise (a weight kept under a name of "
                             "its own, or as a vector) is missing; map every layer with --map "
                             "mlp.0.weight=NAME --map mlp.0.bias=NAME …, or write a build(case) glue")
    if own != want:
        raise fire_kit.Skip(f"the case's MLP is {describe(want)}, this module's "
                            f"{describe(own)} ({built})")
    if unordered:
        raise fire_kit.Skip(unordered)
    loaded = {}
    for (w, b), (their_w, their_b) in zip(ours_layers, layers):
        loaded[their_w] = w
        if their_b is not None:
            loaded[their_b] = b
    return loaded


def parametrized(m):
    """``{name: (owner module, attribute)}`` of the tensors ``torch.nn.utils.parametrize``
    computes (a softplus c, ``weight_norm``'s weight), by the name the tensor has as an attribute
    (``c``, ``mlp.0.weight``): the state dict holds only what they are computed from
    (``parametrizations.c.original``), which is not the parameter the case's value is."""
    if torch is None:
        return {}
    from torch.nn.utils import parametrize

    out = {}
    for prefix, mod in m.named_modules():
        if parametrize.is_parametrized(mod):
            for attr in mod.parametrizations:
                out[f"{prefix}.{attr}" if prefix else attr] = (mod, attr)
    return out


def effective_state(m):
    """The torch module's state dict with every parametrised tensor under its own name and
    value (``parametrized``) in place of what it is computed from."""
    state = m.state_dict()
    views = parametrized(m)
    if not views:
        return state
    out = {k: v for k, v in state.items() if "parametrizations" not in k.split(".")}
    with torch.no_grad():
        out.update({name: getattr(mod, attr).detach().clone() for name, (mod, attr) in views.items()})
    return out


def trainable(m):
    """``{name: requires_grad}`` of what the module trains, parametrised tensors by their own
    names (one trains where what it is computed from does)."""
    out = {n: p.requires_grad for n, p in m.named_parameters() if "parametrizations" not in n.split(".")}
    for name, (mod, attr) in parametrized(m).items():
        out[name] = any(p.requires_grad for p in mod.parametrizations[attr].parameters())
    return out


def assign(m, values):
    """Loads ``values`` (``{name: tensor}``, names as ``effective_state`` has them) into the torch
    module: a parametrised tensor by assignment, which runs its ``right_inverse`` and stores what
    it is computed from, then read back (a parametrisation that cannot hold the value is refused
    by name); the rest with ``load_state_dict``."""
    views = parametrized(m)
    m.load_state_dict({k: v for k, v in values.items() if k not in views}, strict=False)
    with torch.no_grad():
        for k, v in values.items():
            if k not in views:
                continue
            mod, attr = views[k]
            was = getattr(mod, attr)
            try:
                setattr(mod, attr, v.to(was.dtype).reshape(was.shape))
            except (NotImplementedError, RuntimeError) as e:
                raise ParamsMismatch(
                    f"`{k}` is parametrised (torch.nn.utils.parametrize) without a right_inverse, so "
                    f"no value can be assigned to it ({type(e).__name__}: {str(e).splitlines()[0]}); "
                    "define right_inverse, or write a build(case) glue that converts") from None
            held = getattr(mod, attr)
            # Within a few roundings of the dtype it is held in (a bfloat16 weight norm's
            # g·v/|v| is one ulp off what was assigned), and never looser than 1e-5.
            rtol = max(1e-5, 4 * torch.finfo(held.dtype).eps) if held.is_floating_point() else 1e-5
            if not torch.allclose(held, v.to(held.dtype).reshape(held.shape), rtol=rtol, atol=0, equal_nan=False):
                raise Unheld(k, v, held)


class Unheld(fire_kit.Mistake, ValueError):
    """A parametrised tensor that holds another value than the one assigned to it: a
    ``right_inverse`` that is not the inverse of the forward, or a constraint the value breaks."""

    def __init__(self, name, value, held):
        self.name, self.value = name, value
        super().__init__(
            f"the module's parametrised `{name}` cannot hold the case's value: assigned "
            f"{value.flatten()[:4].tolist()}, it holds {held.flatten()[:4].tolist()} (its "
            "parametrisation constrains it, or its right_inverse is not the forward's inverse)")


def wrapped(state, mapping):
    """``--map`` entries for a module whose Appendix E names all sit under one prefix, a wrapper's
    (``torch.compile``'s ``_orig_mod.``, ``nn.DataParallel``'s ``module.``, an attribute
    ``fire.``): each of our names found there, unless mapped. Nothing where the module has ``c``
    itself or it is mapped; a module holding the names under several prefixes (a ``ModuleList``
    of per-layer FIREs) is refused naming them, since only the user can choose between them."""
    if "c" in state or "c" in mapping:
        return {}
    prefixes = {k[:-len("c")] for k in state if k.endswith(".c")}
    prefixes = sorted(p for p in prefixes if f"{p}L_multiplier" in state or f"{p}init_L" in state)
    if len(prefixes) > 1:
        raise ParamsMismatch(f"the module holds {len(prefixes)} FIREs, under {prefixes} (a ModuleList of "
                             "per-layer encodings?), and the glue drives one: write a build(case) glue "
                             f"that loads one of them (its names under `{prefixes[0]}`) and calls it "
                             "(conformance/README.md)")
    if not prefixes:
        return {}
    p = prefixes[0]
    return {k[len(p):]: k for k in state if k.startswith(p) and is_our_name(k[len(p):])}


class Loaded(dict):
    """What ``load_torch`` loaded, ``{the module's name: ours}``, and ``transposed``: the names of
    the weights it keeps ``[in, out]``, whose values and gradients are the transposes of
    the case's ``[out, in]``."""

    def __init__(self, loaded, transposed=()):
        super().__init__(loaded)
        self.transposed = set(transposed)


def load_torch(m, ours, mapping, dt, built):
    """Loads the case's parameters ``ours`` into the torch module ``m`` (already in ``dt``) and
    returns ``{the module's name: ours}`` of what it loaded.

    Layer by layer rather than one strict ``load_state_dict``: the catalogue's MLP mistakes
    (spec/variants.md) are modules whose state a strict load refuses. A layer built with
    ``bias=False`` takes the weight and leaves the case's bias out, which is exactly the mistake
    (``hidden-bias-missing``, ``output-bias-missing``), graded and named like any other; a
    dropped activation (``no-hidden-activation``) renumbers the layers, which go by position.
    Scalars stored as ``[1]`` take the case's ``[]`` values. Layers written as parameters are
    found by their names (``hand_written``), and weights outside ``nn.Linear`` kept ``[in, out]``
    (``z @ w``) where only that composes take the transposes (``Loaded.transposed``).
    Buffers the case has no value for (a table of positions) keep what the constructor made;
    ``init_L`` may be absent from the state, the constructor having taken it. Anything else is
    refused with the names: a case value with nowhere to go, or a module parameter no case
    value reaches."""
    state = effective_state(m)
    params = set(trainable(m))
    mapping = {**wrapped(state, mapping), **mapping}
    for k, theirs in mapping.items():
        if theirs not in state:
            raise ParamsMismatch(f"--map {k}={theirs}: the module has no such parameter or buffer; "
                             f"it has {list(state)}")
    layers = torch_layers(m, state, mapping)
    # Weights outside nn.Linear (named mlp.N, mapped, or written as parameters) may be kept
    # [in, out] for `z @ w`: so read where only that composes.
    linear = {f"{name}.weight" for name, mod in m.named_modules() if isinstance(mod, torch.nn.Linear)}
    transposed = set()
    if layers and not any(w in linear for w, _ in layers) and \
            hand_written.stored_in_out([tuple(state[w].shape) for w, _ in layers], False):
        transposed = {w for w, _ in layers if state[w].dim() == 2}
    own = [tuple(state[w].shape)[::-1] if w in transposed else tuple(state[w].shape) for w, _ in layers]
    claimed = {n for layer in layers for n in layer} | set(mapping.values()) | set(construction.SCALARS)
    vectors = unclaimed_vectors({n: state[n].shape for n in state if n in params}, claimed)
    layers, unordered = loose_biases(layers, own, vectors, mapped_biases(mapping, len(layers)))
    missing = ("the module has no MLP layer the glue can find (no nn.Linear, no parameter named "
               "mlp.N.weight, none whose name says it is a weight (w, weight, kernel: `W1`, `w_in`) "
               f"among {list(state)}); map them with --map mlp.0.weight=NAME, …")
    loaded = Loaded(assign_layers(ours, layers, own, missing, built, unordered), transposed)
    for k in ("c", "init_L", "L_multiplier"):
        theirs = mapping.get(k, k)
        if theirs not in state and k not in mapping:
            # A scalar under a name of its own that says which it is (``fire_c``, ``L_mult``).
            free = [n for n in state if state[n].numel() <= 1 and n not in loaded
                    and n not in mapping.values() and not is_our_name(n)]
            theirs = hand_written.scalar(k, free) or theirs
        if theirs in state:
            loaded[theirs] = k
        elif k not in OPTIONAL_SCALARS or k in mapping:
            raise ParamsMismatch(f"the module has no parameter or buffer `{theirs}` for the case's `{k}` "
                             f"(it has {list(state)}); {map_or_convert(k, list(state))}")
    if "L_multiplier" not in loaded.values():
        trained = {n for n, grad in trainable(m).items() if grad}
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
        if theirs in transposed:
            v = v.T
        shape = tuple(state[theirs].shape)
        if tuple(v.shape) != shape:
            if takes_shape(tuple(v.shape), shape):
                v = v.reshape(shape)
            else:
                raise ValueError(f"the case's `{k}` has shape {list(v.shape)}, the module's "
                                 f"`{theirs}` {list(shape)}")
        values[theirs] = v
    try:
        assign(m, values)
    except Unheld as e:
        ours_name = loaded.get(e.name)
        if ours_name not in ("c", "L_multiplier") or float(ours[ours_name]) >= 0:
            raise
        # Only |c| and |m| enter FIRE [fire.psi, fire.threshold]: a scalar positive by
        # construction (softplus c, exp m) holds the values of a negative one, but not its
        # gradient, whose sign flips.
        raise fire_kit.Skip(f"the module's parametrised `{e.name}` cannot hold the case's {ours_name} = "
                            f"{float(ours[ours_name])} (only its magnitude enters the values, but the "
                            "gradient at a negative value cannot be taken): a case it cannot "
                            "represent") from None
    return loaded


# A parameter so named holds a scalar through a transform (``log_c``, ``raw_L_multiplier``,
# ``c_unconstrained``): no case value loads into it as it is.
TRANSFORM_WORDS = ("log", "raw", "inv", "softplus", "unconstrained", "pre", "exp")


def transformed(name, names):
    """The first of ``names`` (the module's parameter names, a path's last part read) that looks
    like our scalar ``name`` held through a transform (``TRANSFORM_WORDS``), or None."""
    ours = name.lower().replace("_", "")
    for theirs in names:
        last = re.split(r"[./]", theirs)[-1].lower().replace("_", "")
        for word in TRANSFORM_WORDS:
            if last in (word + ours, ours + word):
                return theirs
    return None


def map_or_convert(name, names, path="NAME"):
    """How to reach the case's scalar ``name`` the module has no parameter of that name for:
    ``--map`` it, or, where one of ``names`` looks like it held through a transform
    (``transformed``), write a build(case) glue that converts — ``--map`` would load the case's
    value into the transform's argument."""
    theirs = transformed(name, names)
    if theirs is None:
        return f"map it with --map {name}={path}"
    return (f"`{theirs}` looks like {name} held through a transform (a log, a softplus⁻¹), which no "
            "case value loads into as it is: write a build(case) glue that converts "
            f"(conformance/README.md); if it holds {name} itself, --map {name}={theirs}")


def takes_shape(have, want):
    """Whether a case's value of shape ``have`` (a scalar or a vector) goes into a module's of
    shape ``want``: a scalar into any one-element shape (``[1]``, or ``[1, 1, 1]`` kept ready to
    broadcast), a vector into a shape of its length alone (``[H]``, or ``[H, 1, 1]`` kept ready
    to broadcast over a head-first bias; the first layer's ``[W, 1]`` weight into a ``[W]``,
    ``first_layer``)."""
    n = int(np.prod(have))
    return n == int(np.prod(want)) and (n == 1 or vector_length(have) == n == vector_length(want))


OPTIONAL_SCALARS = ("init_L", "L_multiplier")


def materialise(m):
    """Makes the parameters of a torch module's lazy layers (``nn.LazyLinear``), which exist
    only after a first call, so that there is something to load the case's values into: the
    linear layers in the order they were built, the first taking FIRE's one input and each the
    one before's outputs (f_θ's chain, [fire.mlp]). Whatever does not fit is left to the loading
    to name."""
    if not any(isinstance(p, torch.nn.parameter.UninitializedParameter) for p in m.parameters()):
        return
    width = 1
    try:
        for layer in m.modules():
            if not isinstance(layer, torch.nn.Linear):
                continue
            if getattr(layer, "has_uninitialized_params", lambda: False)():
                layer.initialize_parameters(torch.zeros(1, width, dtype=layer.weight.dtype))
            width = layer.out_features
    except Exception:
        pass


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
                             f"none of the case's values: if one is the threshold's multiplier m "
                             f"(L = |m·L_init|), {how}; one that holds L itself or log L is another "
                             "parameterisation, which a build(case) glue converts; a module without "
                             "any computes L = L_init (the catalogue's multiplier-ignored)")


def reading(loaded, ours, shown=str, transposed=()):
    """How the glue read the module, for the reply's note (``Case.note``): each of the module's
    parameters ``loaded`` (``{the module's name: ours}``) whose name is not ours after a
    wrapper's prefix or a tree's path (``fire.mlp.0.weight``, ``fire/c``), as "`fc1.weight` as
    mlp.0.weight", those in ``transposed`` (a JAX kernel, ``[in, out]``) said so, and the
    layers' weights and biases of the case (``ours``) no parameter took (a layer built without
    a bias); None where every name is ours. A module read otherwise than its author meant fails
    as a mistake would: the note says which of its parameters took which value. ``shown``: a
    name as the note writes it."""
    order = {name: k for k, name in enumerate(ours)}
    read = sorted(((order.get(k, len(order)), k, theirs) for theirs, k in loaded.items()
                   if not re.search(r"(^|[./])" + re.escape(k) + "$", shown(theirs))
                   or theirs in transposed), key=lambda t: t[:2])
    said = [f"`{shown(theirs)}`{' ([in, out], transposed)' if theirs in transposed else ''} as {k}"
            for _, k, theirs in read]
    left = [k for k in ours if k.startswith("mlp.") and k not in loaded.values()]
    if not said and not left:
        return None
    text = "read the module's " + ", ".join(said) if said else ""
    if left:
        text += ("; " if text else "") + f"no parameter of the module took {', '.join(left)}"
    return text


def describe(shapes):
    """An MLP's ``[out, in]`` layer shapes as ``1 → 32 → 32 → 12``; shapes that do not compose
    from one input as they are, first to last."""
    if not shapes:
        return "empty"
    if not is_chain(shapes):
        return "layers of [out, in] shapes " + ", ".join(str(list(s)) for s in shapes) + \
            ", which do not compose from one input"
    return " → ".join(str(n) for n in [shapes[0][1]] + [s[0] for s in shapes])
