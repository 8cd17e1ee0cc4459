"""How the JAX glue reads a module's variables tree: which leaves are f_θ's layers, in what
order and layout (``jax_layers``, ``stored_in_out``: Flax's ``kernel`` and Haiku's ``w``
``[in, out]``, Equinox's ``weight`` ``[out, in]``, hand-written layers by their names), where each
scalar of the case is (``load_jax``), and the case's values put in the module's layout
(``place``). The torch glue's counterpart is ``loading``, whose shape rules both share.
spec: [fire.params], [fire.mlp]
"""

import re

import numpy as np

from fire_conformance import construction
from fire_conformance import hand_written
from fire_conformance import loading
from fire_conformance.layers import (
    chain_order, is_chain, loose_biases, mapped_biases, unclaimed_vectors)

SCALARS = construction.SCALARS
# Leaves named as Appendix E's constructor arguments, which a module keeps as it was given them
# (an Equinox field `eps: float`): never the threshold's multiplier under another name.
ARGUMENTS = ("init_L",) + construction.SHAPE_ARGS + construction.INITIAL_ARGS


# The names of a layer's weight stored `[in, out]` (`x @ w`) and of the bias beside it: Flax's
# `Dense`, Haiku's `Linear`. Without any, `weight` leaves (Equinox's `Linear`, a port that kept
# PyTorch's names) are `[out, in]` unless only `[in, out]` composes (`stored_in_out`).
IN_OUT = {"kernel": "bias", "w": "b"}


def bias_beside(path):
    """Where the bias of the layer whose weight is at ``path`` is, by the weight's name."""
    return path[:-1] + (IN_OUT.get(path[-1], "bias"),)


def jax_layers(flat, mapping):
    """The module's MLP layers, first to last, as ``(kernel path, bias path or None)`` in its
    params tree: the layers mapped to our names (``--map mlp.N.weight=PATH``) when any are, in
    the order of N, else every 2-D ``kernel`` leaf (Flax) or ``w`` leaf (Haiku), or, in a tree
    without any, every 2-D ``weight`` leaf (Equinox's ``[out, in]``), in the order their shapes
    compose (the tree's order where several do). A ``Dense(use_bias=False)`` has no bias: None."""
    named = []
    for name, path in mapping.items():
        hit = re.fullmatch(r"mlp\.(\d+)\.weight", name)
        if hit:
            named.append((int(hit.group(1)), path))
    if named:
        out = []
        for n, path in sorted(named):
            b = mapping.get(f"mlp.{n}.bias", bias_beside(path))
            out.append((path, b if b in flat else None))
        return out
    kernels = [p for p in flat if p[-1] in IN_OUT and np.ndim(flat[p]) == 2]
    if not kernels:
        kernels = [p for p in flat if p[-1] == "weight" and np.ndim(flat[p]) == 2]
    order = composing(kernels, flat)
    if not any(is_chain([hand_written.read(np.shape(flat[k]), t) for k in order]) for t in (False, True)):
        # Layers written as parameters (``self.param("w_in", ...)``), alone or beside the
        # framework's, found by their names where those make the chain the kernels do not.
        claimed = set(mapping.values())
        found = hand_written.layers({p: tuple(np.shape(v)) for p, v in flat.items()
                                     if p not in claimed and p[-1] not in SCALARS + ARGUMENTS}, True)
        if found:
            return found
    return [(k, bias_beside(k) if bias_beside(k) in flat else None) for k in order]


def composing(kernels, flat):
    """``kernels`` in the order their shapes compose from one input, read in their name's layout
    (``[in, out]`` for ``IN_OUT``'s names, ``[out, in]`` for ``weight``), or in the other where
    only that composes (a hand-written layer keeping PyTorch's ``[out, in]`` as ``w``, or
    computing ``x @ weight``; ``stored_in_out`` decides the same)."""
    stored = lambda k: tuple(np.shape(flat[k]))  # noqa: E731
    named = lambda k: stored(k)[::-1] if k[-1] in IN_OUT else stored(k)  # noqa: E731
    other = lambda k: stored(k) if k[-1] in IN_OUT else stored(k)[::-1]  # noqa: E731
    order = chain_order(kernels, named)
    if not is_chain([named(k) for k in order]):
        alternative = chain_order(kernels, other)
        if is_chain([other(k) for k in alternative]):
            return alternative
    return order


def load_jax(flat, ours, mapping, built, elsewhere=(), ordered=True):
    """Where each of the case's parameters ``ours`` goes in the module's flattened params tree
    ``flat``: ``{path: our name}``, and where a scalar outside ``params`` goes (``elsewhere``, the
    scalar leaves of the other collections by ``(collection,) + path``): ``{path: our name}``.
    Layer by layer, as ``loading.load_torch`` loads a torch module and for the same reason: the
    catalogue's MLP mistakes (spec/variants.md) are modules whose tree is not Appendix E's. A
    ``Dense(use_bias=False)`` takes the kernel and leaves the case's bias out, which is exactly the
    mistake (``hidden-bias-missing``, ``output-bias-missing``), graded and named. A case whose MLP
    is not the module's (another depth, other widths) is skipped; a case value with nowhere to go
    is refused by name; the module parameters no case value reaches are returned last (kept as
    built where the bias has no gradient in them, ``JaxGlue.constants``, else refused). A scalar
    found by its name only outside ``params`` (an ``init_L`` constant; a ``c`` or ``L_multiplier`` kept there, which
    then never trains) takes the case's value there; ``L_multiplier`` may be absent
    (``loading.no_multiplier``), unless another scalar leaf could be it. ``ordered``: whether
    ``flat`` keeps the order the module made its parameters in (``layers.loose_biases``)."""
    for name, path in mapping.items():
        if path not in flat:
            raise loading.ParamsMismatch(f"--map {name}={'/'.join(path)}: no such parameter; the module's are "
                             f"{['/'.join(q) for q in flat]}")
    layers = jax_layers(flat, mapping)
    # A vector first weight is [W, 1] either way: not said to be transposed.
    in_out = {k for k in stored_in_out(flat, layers, mapping) if np.ndim(flat[k]) == 2}
    # Compared as [out, in], the case's (and PyTorch's) layout.
    own = [tuple(np.shape(flat[k]))[::-1] if k in in_out else tuple(np.shape(flat[k])) for k, _ in layers]
    claimed = {p for layer in layers for p in layer} | set(mapping.values())
    vectors = unclaimed_vectors({p: np.shape(v) for p, v in flat.items() if p[-1] not in SCALARS + ARGUMENTS},
                                        claimed)
    layers, unordered = loose_biases(layers, own, vectors, mapped_biases(mapping, len(layers)),
                                             "/".join, ordered)
    missing = ("the module has no MLP layer the glue can find (no 2-D `kernel`, `w` or `weight`, no "
               "leaf whose name says it is a weight (`W1`, `w_in`) among "
               f"{['/'.join(q) for q in flat]}); map them with --map mlp.0.weight=PATH, …")
    loaded = loading.assign_layers(ours, layers, own, missing, built, unordered)
    outside = {}
    for name in SCALARS:
        if name in mapping:
            loaded[mapping[name]] = name
            continue
        hits = [p for p in flat if p[-1] == name]
        there = [p for p in elsewhere if p[-1] == name]
        if not hits and not there:
            # A scalar under a name of its own that says which it is (``fire_c``, ``L_mult``).
            taken = set(loaded) | set(outside) | set(mapping.values())
            free = [p for p in flat if np.size(flat[p]) <= 1 and p not in taken]
            found = hand_written.scalar(name, free)
            hits = [found] if found is not None else []
            if not hits:
                found = hand_written.scalar(name, [p for p in elsewhere if p not in taken
                                                   and p[-1] not in ARGUMENTS])
                there = [found] if found is not None else []
        if len(hits) == 1:
            loaded[hits[0]] = name
        elif not hits and len(there) == 1:
            outside[there[0]] = name
        elif name not in loading.OPTIONAL_SCALARS or len(hits) > 1:
            found = f"{len(hits)} leaves named so" if hits else "no leaf named so"
            raise loading.ParamsMismatch(f"the module's params have {found} for the case's `{name}` "
                             f"({['/'.join(q) for q in flat]}); "
                             f"{loading.map_or_convert(name, ['/'.join(q) for q in flat], 'PATH')}")
    if "L_multiplier" not in loaded.values() and "L_multiplier" not in outside.values():
        loading.no_multiplier(any(p[-1] == "init_L" for p in loaded),
                                 ["/".join(p) for p in elsewhere if p[-1] not in ARGUMENTS and p not in outside],
                                 "write a build(case) glue that sets it (--map reaches `params` only)")
    return loaded, outside, in_out, [p for p in flat if p not in loaded]


def unreached(unset, ours):
    """The refusal of a module whose parameters ``unset`` take none of the case's values
    ``ours`` and do reach its bias (``JaxGlue.constants``)."""
    return loading.ParamsMismatch(
        f"the module's parameter(s) {['/'.join(p) for p in unset]} take none of the case's values "
        f"({sorted(ours)}) and its bias has a gradient in them, so they would train beside FIRE's; "
        "map them with --map OURS=PATH, or write a build(case) glue (one that converts, where the "
        "module stores a value otherwise: log L, softplus⁻¹ c); an array meant to stay fixed (a "
        "table of positions) is read through jax.lax.stop_gradient, or kept outside the parameters")


def stored_in_out(flat, layers, mapping):
    """The weight paths of ``layers`` stored ``[in, out]`` (JAX's ``x @ w``), to be transposed
    to and from the case's ``[out, in]``. Flax's ``kernel`` and Haiku's ``w`` leaves are, unless
    only ``[out, in]`` composes (Equinox's ``weight``
    leaves are ``[out, in]``, as PyTorch's, unless only ``[in, out]`` composes); mapped weights
    (``--map mlp.N.weight=PATH``, named anything) are too, unless only PyTorch's ``[out, in]``
    (``x @ w.T``, a port that kept torch's layout) makes the layers compose from one input."""
    paths = [k for k, _ in layers]
    stored = [tuple(np.shape(flat[k])) for k in paths]
    # Read [out, in] as stored, or [in, out] reversed; a first layer's vector weight is [W, 1]
    # either way (``hand_written.first_layer``).
    shapes = hand_written.first_layer(stored)
    as_in_out = hand_written.first_layer([s[::-1] for s in stored])
    if not any(re.fullmatch(r"mlp\.\d+\.weight", name) for name in mapping):
        if not all(k[-1] in IN_OUT or k[-1] == "weight" for k in paths):
            # Layers written as parameters (``hand_written``): JAX's ``x @ w`` unless only
            # PyTorch's layout composes.
            return set(paths) if hand_written.stored_in_out(stored, True) else set()
        if any(k[-1] in IN_OUT for k in paths):
            # Stored [in, out] unless only [out, in] composes (a hand-written `w` keeping
            # PyTorch's layout).
            if not is_chain(as_in_out) and is_chain(shapes):
                return set()
            return {k for k in paths if k[-1] in IN_OUT}
        # `weight` leaves: [out, in] (Equinox's, PyTorch's) unless only [in, out] composes (a
        # hand-written layer computing x @ w).
        if not is_chain(shapes) and is_chain(as_in_out):
            return set(paths)
        return set()
    if not is_chain(as_in_out) and is_chain(shapes):
        return set()
    return set(paths)


def place(value, leaf, path, transpose=False):
    """Our array in the module's layout (``transpose``: a weight stored ``[in, out]``); shapes
    must then agree."""
    value = np.asarray(value)
    if transpose:
        value = value.T
    want = tuple(np.shape(leaf))
    if value.shape != want:
        if loading.takes_shape(value.shape, want):
            value = value.reshape(want)
        else:
            raise loading.ParamsMismatch(f"parameter {'/'.join(path)} has shape {list(want)} in the module, "
                             f"ours is {list(value.shape)}")
    return value


def kept_as_built(unset):
    """The note of arrays among the parameters that take none of the case's values and that the
    bias has no gradient in (``JaxGlue.constants``): graded as built; what would still move them."""
    return (f"kept as built: {['/'.join(p) for p in unset]} (among the parameters, no case value "
            "reaches them and the bias has no gradient in them); an optimiser with weight decay "
            "(AdamW) still moves what it is given, so a fixed table belongs outside what it updates "
            "(a collection other than `params`, an `nnx.Variable`, `hk.get_state`, a static field)")
