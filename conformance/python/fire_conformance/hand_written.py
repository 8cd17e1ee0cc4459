"""fire_conformance.hand_written: a module's parameters found by what their names say, where they
are neither Appendix E's names nor its framework's layers. Its scalars first: a one-element
parameter whose name has c's word (``fire_c``, ``c_param``), the multiplier's (``L_mult``,
``threshold_multiplier``) or L_init's (``L_init``) takes that value where it is the only one
(``scalar``). Then f_θ's layers where a module writes them as bare parameters
(``self.W1 = nn.Parameter(...)``, ``self.param("w_in", ...)``, ``z[..., None] * w + b``) rather
than as its framework's layers (``nn.Linear``, ``nn.Dense``, ``hk.Linear``).

Such a module is graded without ``--map`` where the parameters say what they are: a weight is a
parameter whose name has a weight's word (``w``, ``weight``, ``kernel``: ``W1``, ``w_in``,
``fc2_weight``), a bias one with a bias's word (``b``, ``bias``: ``b1``, ``b_in``); the weights
are f_θ's layers in the one order in which their shapes compose from its one scalar input
([fire.mlp]: ``1 → W → … → H``), read ``[out, in]`` (``F.linear``, ``w @ z``) or ``[in, out]``
(``z @ w``) as only one of the two composes, the framework's own layout where both do; a first
layer may keep its weight as a vector ``[W]`` (``first_layer``). Each weight's bias is the
parameter named as it is with the bias's word in place of the weight's (``W1``/``b1``,
``w_in``/``b_in``), else left to ``fire_conformance.layers.loose_biases``, which gives a
bias-free layer an unclaimed vector as long as its output. Names that say neither, or weights that compose in no
order, find nothing, and the loading refuses the module naming the ``--map`` that grades it.
Whatever is read so is said in the run's note ("read the module's `fire_c` as c").
"""

import re

from fire_conformance import construction
from fire_conformance import loading
from fire_conformance.layers import chain_order, is_chain

# A word of a parameter's name that says it is a layer's weight, or its bias.
WEIGHT_WORDS = {"w", "weight", "weights", "kernel", "matrix"}
BIAS_WORDS = {"b", "bias", "biases"}


def last(name):
    """A parameter's own name: the last part of a torch name (``fire.W1``) or of a params tree's
    path (``("fire", "w_in")``)."""
    return name[-1] if isinstance(name, tuple) else name.rsplit(".", 1)[-1]


def with_last(name, own):
    """``name`` with its own name (``last``) replaced by ``own``."""
    if isinstance(name, tuple):
        return name[:-1] + (own,)
    head, _, _ = name.rpartition(".")
    return f"{head}.{own}" if head else own


def words(name):
    """The words of a parameter's own name (``last``): split at every character that is not a
    letter and where a lower-case letter meets an upper-case one, lower-cased (``w_in``: w, in;
    ``W1``: w; ``fc2Weight``: fc, weight)."""
    return [p.lower() for p in re.split(r"[^A-Za-z]+|(?<=[a-z])(?=[A-Z])", last(name)) if p]


def role(name):
    """``"weight"`` or ``"bias"`` as the name's words say one and not the other, else None."""
    said = set(words(name))
    weight, bias = bool(said & WEIGHT_WORDS), bool(said & BIAS_WORDS)
    if weight != bias:
        return "weight" if weight else "bias"
    return None


def read(shape, in_out):
    """A stored weight's ``[out, in]``: its shape, reversed where it is stored ``[in, out]``; a
    vector ``[W]`` is a first layer's ``[W, 1]`` either way."""
    shape = tuple(shape)
    if len(shape) == 1:
        return (shape[0], 1)
    return shape[::-1] if in_out else shape


def stored_in_out(stored, default):
    """Whether weights of ``stored`` shapes (first to last) are kept ``[in, out]``: where only one
    reading makes them compose from one input, that one; where both do (a vector first weight
    and square layers after it), ``default`` (the framework's: False for PyTorch's ``[out,
    in]``)."""
    out_in = is_chain([read(s, False) for s in stored])
    in_out = is_chain([read(s, True) for s in stored])
    if out_in != in_out:
        return in_out
    return default


def bias_of(weight, names):
    """The bias named as ``weight`` is with a bias's word in place of its weight's (``W1``:
    ``b1``; ``mlp_w_in``: ``mlp_b_in``; ``fc2_weight``: ``fc2_bias``) among ``names``, or None."""
    pattern = r"(?<![a-z])(w|W|weight|Weight|WEIGHT|kernel|Kernel)(?![a-z])"
    for replacement in ("b", "B", "bias", "Bias", "BIAS"):
        candidate = with_last(weight, re.sub(pattern, replacement, last(weight), count=1))
        if candidate != weight and candidate in names and role(candidate) == "bias":
            return candidate
    return None


def layers(shapes, default_in_out=False):
    """f_θ's layers among a module's parameters ``shapes`` (``{name: stored shape}`` of those no
    layer, scalar or ``--map`` claims, in the module's order), first to last, as ``(weight, bias
    or None)``: every parameter named as a weight, one- or two-dimensional, in the one order
    their shapes compose from one input (``fire_conformance.layers.chain_order``, the module's
    order among several), read as ``stored_in_out`` says; each with the bias ``bias_of`` names. ``[]`` where
    no parameter is named as a weight, or the weights do not all compose."""
    weights = [n for n, s in shapes.items() if role(n) == "weight" and len(s) in (1, 2)]
    if not weights:
        return []
    for in_out in (default_in_out, not default_in_out):
        order = chain_order(weights, lambda n, t=in_out: read(shapes[n], t))
        if is_chain([read(shapes[n], in_out) for n in order]):
            break
    else:
        return []
    if any(len(shapes[n]) == 1 for n in order[1:]):
        return []
    return [(w, bias_of(w, shapes)) for w in order]


# The words that name each of FIRE's scalars in a parameter's name (``words``); a name that also
# says a transform (``log_c``: ``loading.TRANSFORM_WORDS``) holds a value no case value loads into.
SCALAR_WORDS = {"c": [{"c"}], "L_multiplier": [{"mult"}, {"multiplier"}], "init_L": [{"init", "l"}]}
# The constructor's arguments, which a module may keep as it was given them (``init_c``): never
# the trained scalar under another name.
ARGUMENTS = construction.SHAPE_ARGS + construction.INITIAL_ARGS


def scalar(ours, names):
    """The one of ``names`` (the module's one-element parameters no layer or ``--map`` claims)
    whose words name our scalar ``ours`` (``SCALAR_WORDS``) and no other of them, say no
    transform and are not a constructor argument's name; None where none or several do."""
    def says(name, which):
        said = set(words(name))
        return any(w <= said for w in SCALAR_WORDS[which])

    found = [n for n in names if says(n, ours) and not set(words(n)) & set(loading.TRANSFORM_WORDS)
             and last(n) not in ARGUMENTS
             and not any(says(n, other) for other in SCALAR_WORDS if other != ours)]
    return found[0] if len(found) == 1 else None


def first_layer(shapes):
    """``[out, in]`` layer shapes with a first layer's one-dimensional weight ``[W]`` read as
    ``[W, 1]``: f_θ's input is one scalar, so a hand-written first layer keeps its weight as a
    vector (``x[..., None] * w + b``) as often as a matrix."""
    return [read(s, False) if n == 0 else tuple(s) for n, s in enumerate(shapes)]
