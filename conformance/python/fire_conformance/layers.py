"""fire_conformance.layers: f_θ's layers found among a module's tensors, for the Appendix E glue
(torch) and the JAX glue alike: ``[out, in]`` shapes that compose from one scalar input, in the
order they compose, and a bias-free layer's bias kept as a vector of its own (a hand-written
first layer's vector weight is read by ``hand_written.first_layer``). spec: [fire.mlp]
"""

import os
import re


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


def vector_length(shape):
    """The length of a vector of ``shape``, one-dimensional or with every other axis 1 (a bias
    kept as ``[H, 1, 1]`` or ``[1, W]`` to broadcast); None for any other shape."""
    shape = tuple(shape)
    if len(shape) == 1:
        return shape[0]
    long = [d for d in shape if d != 1]
    return long[0] if len(shape) > 1 and len(long) == 1 else None


# Scalars a module may lack: `init_L`, taken by the constructor; `L_multiplier`, whose absence
# is the catalogue's `multiplier-ignored` (L = L_init), graded and named rather than refused.


def unclaimed_vectors(shapes, claimed):
    """``(name, length)`` of the vectors (``vector_length``) among the module's parameters
    ``shapes`` (name -> shape, in the module's order) that ``claimed`` leaves: what
    ``loose_biases`` may read as a bias-free layer's bias."""
    return [(n, vector_length(s)) for n, s in shapes.items() if n not in claimed and vector_length(s)]


def loose_biases(layers, own, vectors, mapped=None, shown=str, ordered=True):
    """``layers`` (``(weight, bias or None)``, first to last, ``own`` their ``[out, in]``
    shapes) with each layer built without a bias given a vector of ``vectors`` (``(name,
    length)`` of the module's vectors, ``vector_length``, that no layer or scalar claims, in the
    module's order) as long as its output: a bias kept as a parameter of its own beside a
    bias-free layer (``nn.Linear(bias=False)`` and an ``nn.Parameter``, Haiku's
    ``hk.Linear(with_bias=False)`` and ``hk.Bias``), which the module adds itself. ``mapped``
    (``{layer index: name}``, from ``--map mlp.N.bias=NAME``) says it for a layer. A layer with no
    such vector keeps None: the catalogue's ``*-bias-missing`` (a module adding the vector
    elsewhere, after the activation say, fails on values like any other mistake). Where several
    such layers are as wide (the hidden layers of Appendix B's approximator), the vectors go to
    them by the numbers in their names (``b1``, ``b2``; Haiku's ``bias``, ``bias_1``), else in the
    module's order where it keeps the order they were made in (``ordered``: not a tree that
    sorts its names, as ``flax.nnx``'s state). Returns the layers and, where neither orders such
    vectors, why (``assign_layers`` skips a case of the module's architecture with it, saying
    what ``--map`` grades it). ``shown``: a name as the message writes it."""
    out = [list(layer) for layer in layers]
    for k, name in (mapped or {}).items():
        out[k][1] = name
    free = [v for v in vectors if v[0] not in (mapped or {}).values()]
    wide = {}
    for k, ((_, b), shape) in enumerate(zip(out, own)):
        if b is None and len(shape) == 2:
            wide.setdefault(shape[0], []).append(k)
    unordered = None
    for width, ks in wide.items():
        found = [name for name, n in free if n == width]
        if len(ks) > 1 and found:
            by_number = numbered(found, shown)
            if by_number is None and ordered:
                by_number = found
            if by_number is None:
                maps = " ".join(f"--map mlp.{2 * k}.bias=NAME" for k in ks)
                unordered = (f"the module's vectors {[shown(v) for v in found]} could each be the bias "
                             f"of its layers {[shown(out[k][0]) for k in ks]} (each {width} wide), and "
                             f"their names do not number them: which is which cannot be told; {maps} "
                             "grades these cases")
                continue
            found = by_number
        for k, name in zip(ks, found):
            out[k][1] = name
    return [tuple(layer) for layer in out], unordered


def numbered(names, shown=str):
    """``names`` ordered by the number each has after what they all begin with (``b1``,
    ``biases.0``, Haiku's ``fire/~/bias_1/b``; one that ends where the others go on to their
    number, as Haiku names the first of its kind ``bias``, goes first), or None where that does
    not order them (``hidden_bias`` beside ``layer1_bias``)."""
    texts = [shown(name) for name in names]
    # What they all begin with, less any digits it ends in (`b1` of `b12` and `b19`).
    common = os.path.commonprefix(texts).rstrip("0123456789")
    keys = []
    for text in texts:
        rest = text[len(common):]
        hit = re.search(r"\d+", rest)
        if hit is None and rest[:1].isalnum():
            return None
        keys.append(int(hit.group()) if hit else -1)
    if len(set(keys)) != len(keys):
        return None
    return [name for _, name in sorted(zip(keys, names))]


def mapped_biases(mapping, depth):
    """``{layer index: the module's name}`` of the biases ``--map mlp.N.bias=NAME`` names for a
    module whose weights the glue finds itself."""
    return {k: mapping[f"mlp.{2 * k}.bias"] for k in range(depth) if f"mlp.{2 * k}.bias" in mapping}
