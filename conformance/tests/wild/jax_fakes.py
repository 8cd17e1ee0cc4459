"""JAX FIREs with Flax linen's interface (``init``/``apply``) whose params trees are not Appendix
E's two-``Dense`` layout: the catalogue's MLP mistakes (a ``Dense(use_bias=False)``, a dropped
activation), a deeper approximator, scalars kept as ``[1]``, layers named and ordered otherwise,
a trainable ``init_L``, a parameter no case value reaches, a constructor that ignores its width,
no ``L_multiplier``. Plain JAX (no Flax), trees named as
``nn.Dense`` names them. Driven by tests/wild_jax.rs through ``fire_conformance.jax_glue``.
"""

import jax
import jax.numpy as jnp
import numpy as np


class FIRE:
    """Appendix E in JAX; the subclasses change one thing each."""

    hidden_bias = True
    output_bias = True
    activation = staticmethod(jax.nn.relu)
    hidden_layers = 1
    scalar_shape = ()
    init_L_trainable = False
    has_multiplier = True
    # The multiplier's initial value (the spec's is 1).
    multiplier_init = 1.0
    # The params tree's layer names, first layer first; the tree keeps them in `tree_order`.
    names = None
    tree_order = None

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        self.num_heads, self.mlp_width = num_heads, mlp_width
        self.init_c, self.init_L, self.eps = init_c, init_L, eps

    def layer_names(self):
        return self.names or [f"Dense_{n}" for n in range(self.hidden_layers + 1)]

    # The output layer's width, where it is not one per head.
    outputs = None

    def init(self, rng, x):
        w, h = self.mlp_width, self.outputs or self.num_heads
        dims = [1] + [w] * self.hidden_layers + [h]
        names = self.layer_names()
        keys = jax.random.split(rng, len(names))
        layers = {}
        for n, name in enumerate(names):
            layer = {"kernel": jax.random.normal(keys[n], (dims[n], dims[n + 1])) / dims[n] ** 0.5}
            last = n == len(names) - 1
            if (self.output_bias if last else self.hidden_bias):
                layer["bias"] = jnp.zeros(dims[n + 1])
            layers[name] = layer
        order = self.tree_order or names
        scalar = lambda v: jnp.full(self.scalar_shape, v)  # noqa: E731
        params = {name: layers[name] for name in order}
        params.update({"c": scalar(self.init_c)})
        if self.has_multiplier:
            params["L_multiplier"] = scalar(self.multiplier_init)
        params.update(self.extra_params())
        if self.init_L_trainable:
            params["init_L"] = scalar(self.init_L)
            return {"params": params}
        constants = {"init_L": jnp.asarray(self.init_L)}
        constants.update(self.extra_constants())
        return {"params": params, "constants": constants}

    def extra_constants(self):
        return {}

    def extra_params(self):
        return {}

    def apply(self, variables, x):
        positions = jnp.arange(x.shape[2], dtype=x.dtype)
        return self.bias(variables, positions, positions)

    def bias(self, variables, queries, keys):
        p = variables["params"]
        init_L = p["init_L"] if self.init_L_trainable else variables["constants"]["init_L"]
        c = p["c"].reshape(())
        L_multiplier = (p["L_multiplier"].reshape(()) if self.has_multiplier
                        else variables.get("constants", {}).get("L_mult", 1.0))
        init_L = init_L.reshape(())
        rel_distance = queries[:, None] - keys[None, :]
        threshold = jnp.abs(L_multiplier * init_L)
        pos_normalizer = self.thresholded(queries, threshold)[:, None]
        rel_distance = self.psi_of_distances(c, rel_distance)
        pos_normalizer = jnp.log(jnp.abs(c * pos_normalizer) + 1) + self.eps
        h = (rel_distance / pos_normalizer)[..., None]
        names = self.layer_names()
        for n, name in enumerate(names):
            layer = p[name]
            h = h @ layer["kernel"] + self.layer_bias(p, n, name)
            if n < len(names) - 1:
                h = self.activation(h)
        return self.finish(jnp.transpose(h, (2, 0, 1))[None], p)

    def thresholded(self, queries, threshold):
        return jnp.maximum(queries, threshold)

    def layer_bias(self, p, n, name):
        return p[name].get("bias", 0.0)

    def psi_of_distances(self, c, rel_distance):
        return jnp.log(jnp.abs(c * rel_distance) + 1)

    def finish(self, bias, p):
        return bias


class PsiFromInitC(FIRE):
    """The distances' ψ from the constructor's ``init_c`` (a table made in ``setup``), not from
    the ``c`` in ``params``: right while c is where it started, never after training or a
    checkpoint."""

    def psi_of_distances(self, c, rel_distance):
        return jnp.log(jnp.abs(self.init_c * rel_distance) + 1)


class HiddenBiasFalse(FIRE):
    """The hidden layer is ``nn.Dense(width, use_bias=False)``."""

    hidden_bias = False


class OutputBiasFalse(FIRE):
    """The output layer is ``nn.Dense(heads, use_bias=False)``."""

    output_bias = False


class NoHiddenActivation(FIRE):
    """No ReLU between the two layers."""

    activation = staticmethod(lambda h: h)


class GeluDefault(FIRE):
    """``jax.nn.gelu`` where ReLU is specified: JAX's default is the tanh approximation."""

    activation = staticmethod(jax.nn.gelu)


class TwoHidden(FIRE):
    """Appendix B's approximator: two ReLU hidden layers."""

    hidden_layers = 2


class ScalarsShape1(FIRE):
    """``c`` and ``L_multiplier`` kept as ``[1]`` arrays."""

    scalar_shape = (1,)


class NamedOutputFirst(FIRE):
    """Layers named ``hidden``/``out`` with ``out`` first in the tree: order from the shapes."""

    names = ["hidden", "out"]
    tree_order = ["out", "hidden"]


class TrainableInitL(FIRE):
    """``init_L`` a leaf of ``params``: trained, where [grad.layout] freezes it."""

    init_L_trainable = True


class ExtraParameter(FIRE):
    """A learnable output scale no case value reaches."""

    def extra_params(self):
        return {"scale": jnp.asarray(1.0)}

    def finish(self, bias, p):
        return bias * p["scale"]


class WidthIgnored(FIRE):
    """Takes ``mlp_width`` and builds 32 wide whatever it is given (and its ε hard-coded, which
    only cases of other widths would show): refused, not skipped."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, 32, init_c, init_L, 1e-6)


class NoMultiplier(FIRE):
    """No ``L_multiplier``: L = init_L, the catalogue's ``multiplier-ignored``, graded and named."""

    has_multiplier = False


class FixedWidth(FIRE):
    """One architecture by design, 32 wide: the constructor takes the rest through ``**kwargs``
    and does not claim a width, so the cases of other widths are skipped, not refused."""

    def __init__(self, num_heads=12, **kwargs):
        super().__init__(num_heads, 32, kwargs.get("init_c", 0.1), kwargs.get("init_L", 512.0),
                         kwargs.get("eps", 1e-6))


class MultiplierConstant(FIRE):
    """The multiplier kept outside ``params``, as the constant ``L_mult``: it may be the
    multiplier under another name, which the glue cannot reach, so it is refused, not graded as
    ``multiplier-ignored``."""

    has_multiplier = False

    def extra_constants(self):
        return {"L_mult": jnp.asarray(1.0)}


class LearnsLDirectly(FIRE):
    """No multiplier, ``init_L`` trained: L learned directly, a reparametrisation the glue
    refuses rather than grade as ``multiplier-ignored``."""

    has_multiplier = False
    init_L_trainable = True


class MultiplierStartsAtHalf(FIRE):
    """The multiplier initialised at 0.5, not [fire.defaults]' 1: L starts at 256."""

    multiplier_init = 0.5


class IgnoresInitC(FIRE):
    """Takes ``init_c`` and starts c at 0.1 whatever it is given: the glue loads each case's c
    over it, so only the module as built shows it."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, 0.1, init_L, eps)


class OtherDefaults(FIRE):
    """Constructor defaults not the spec's: c = 1, L_init = 2048, ε = 1e-3."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=1.0, init_L=2048.0, eps=1e-3):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)


class DefaultEpsTenTimes(FIRE):
    """A default ε of 1e-5, not the spec's 1e-6: within f32's tolerance on the default case, so
    it passes, and the run's note says it (audit 32: nothing did)."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-5):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)


class RequiredArguments(FIRE):
    """Correct, with no defaults of its own: the caller passes c, L_init and ε."""

    def __init__(self, num_heads, mlp_width, init_c, init_L, eps):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)


class RequiresL(FIRE):
    """Correct, with L_init required and the spec's defaults for c and ε."""

    def __init__(self, num_heads, mlp_width, init_L, init_c=0.1, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)


class RequiresLOtherDefaults(FIRE):
    """L_init required; c and ε default to 1 and 1e-3, not the spec's."""

    def __init__(self, num_heads, mlp_width, init_L, init_c=1.0, eps=1e-3):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)


class BatchedOutput(FIRE):
    """Correct, the bias broadcast over x's batch: [B, H, T, T], values and gradients."""

    def apply(self, variables, x):
        bias = super().apply(variables, x)
        return jnp.broadcast_to(bias, (x.shape[0],) + bias.shape[1:])


class BatchHeadsInterleaved(FIRE):
    """[B, H, T, T] built as [H·B, T, T] head-major (``jnp.repeat``) and reshaped: right at B = 1,
    the heads of the sequences mixed up at B > 1."""

    def apply(self, variables, x):
        bias = super().apply(variables, x)[0]
        return jnp.repeat(bias, x.shape[0], axis=0).reshape((x.shape[0],) + bias.shape)


class LengthsCall(FIRE):
    """Correct, called as x-transformers' ``forward(i, j)``: the bias of the last i of j
    positions over all j."""

    def init(self, rng, i, j):
        return super().init(rng, jnp.zeros((1, 1, j, 1)))

    def apply(self, variables, i, j):
        return super().apply(variables, jnp.zeros((1, 1, j, 1)))[:, :, j - i:, :]


class QueryKeyStates(FIRE):
    """Correct, called with the attention's query and key tensors [B, H, n, D], [B, H, T, D],
    read only for their lengths: the bias of the last n of T positions over all T."""

    def init(self, rng, q, k):
        return super().init(rng, jnp.zeros((1, 1, k.shape[-2], 1)))

    def apply(self, variables, q, k):
        n, T = q.shape[-2], k.shape[-2]
        return super().apply(variables, jnp.zeros((1, 1, T, 1)))[:, :, T - n:, :]


class VectorFirstWeight(FIRE):
    """Correct, hand-written: the first layer's weight kept as a vector [W] under a name of its
    own (``x[..., None] * w_in + b_in``), the output layer a Dense: found by its name (a vector
    of W is the first layer's [W, 1] weight, f_θ's input being one scalar), and mapped alike."""

    names = ["first", "out"]

    def init(self, rng, x):
        v = super().init(rng, x)
        first = v["params"].pop("first")
        v["params"]["w_in"] = first["kernel"].reshape(-1)
        v["params"]["b_in"] = first["bias"]
        return v

    def apply(self, variables, x):
        p = dict(variables["params"])
        p["first"] = {"kernel": p.pop("w_in")[None, :], "bias": p.pop("b_in")}
        return super().apply({**variables, "params": p}, x)


class HandWritten(FIRE):
    """Correct, hand-written: every layer a bare parameter of the tree, ``W1`` ``[1, W]`` and ``W2``
    ``[W, H]`` for ``z @ W`` with ``b1``, ``b2`` beside them: found by their names and shapes,
    without --map. ``torch_layout``: the weights kept ``[out, in]`` (``w @ z``, a port of PyTorch
    code), read so since only that composes. ``names_say``: False names them ``p1``…``p4``,
    which say nothing, refused naming the --map."""

    torch_layout = False
    names_say = True

    def init(self, rng, x):
        v = super().init(rng, x)
        p = v["params"]
        first, out = p.pop("Dense_0"), p.pop("Dense_1")
        w1, w2 = first["kernel"], out["kernel"]
        if self.torch_layout:
            w1, w2 = w1.T, w2.T
        names = ["W1", "b1", "W2", "b2"] if self.names_say else ["p1", "p2", "p3", "p4"]
        p.update(zip(names, [w1, first["bias"], w2, out["bias"]]))
        return v

    def apply(self, variables, x):
        p = dict(variables["params"])
        names = ["W1", "b1", "W2", "b2"] if self.names_say else ["p1", "p2", "p3", "p4"]
        w1, b1, w2, b2 = (p.pop(n) for n in names)
        if self.torch_layout:
            w1, w2 = w1.T, w2.T
        p["Dense_0"], p["Dense_1"] = {"kernel": w1, "bias": b1}, {"kernel": w2, "bias": b2}
        return super().apply({**variables, "params": p}, x)


class HandWrittenTorchLayout(HandWritten):
    torch_layout = True


class HandWrittenUnnamed(HandWritten):
    names_say = False


class LogNamedC(FIRE):
    """Correct, but c held as ``log_c`` (exponentiated in ``apply``): no leaf is named c, and
    ``--map c=log_c`` would load c into its log — told to write a build(case) glue that
    converts (audit 31)."""

    def init(self, rng, x):
        v = super().init(rng, x)
        v["params"]["log_c"] = jnp.log(jnp.abs(v["params"].pop("c")))
        return v

    def apply(self, variables, x):
        p = dict(variables["params"])
        p["c"] = jnp.exp(p.pop("log_c"))
        return super().apply({**variables, "params": p}, x)


class CInConstants(FIRE):
    """c kept in the ``constants`` collection, outside ``params``: its values are right, but no
    gradient reaches it, so c never trains (audit 19)."""

    def init(self, rng, x):
        v = super().init(rng, x)
        v["constants"]["c"] = v["params"].pop("c")
        return v

    def apply(self, variables, x):
        return super().apply({**variables, "params": {**variables["params"],
                                                      "c": variables["constants"]["c"]}}, x)


class IgnoresInitLConstant(FIRE):
    """Keeps ``init_L`` as a constant, but always 512 whatever it is given."""

    def init(self, rng, x):
        v = super().init(rng, x)
        v["constants"]["init_L"] = jnp.asarray(512.0)
        return v


class ReturnsNumpy(FIRE):
    """Right values handed back as a NumPy array (``np.asarray`` at the end of apply): its bias
    is graded, and no parameter gets a gradient (audit 28: the gradient cases had been skipped,
    the run passing)."""

    def finish(self, bias, p):
        return np.asarray(bias)


class ExplicitWeights(FIRE):
    """Correct: the MLP's weights as explicit leaves ``w1``, ``b1``, ``w2``, ``b2`` (no
    ``kernel``) in JAX's ``[in, out]`` (``x @ w1``); graded once mapped (audit 19)."""

    torch_layout = False

    def init(self, rng, x):
        v = super().init(rng, x)
        p = v["params"]
        for n, name in enumerate(self.layer_names()):
            layer = p.pop(name)
            p[f"w{n + 1}"] = layer["kernel"].T if self.torch_layout else layer["kernel"]
            p[f"b{n + 1}"] = layer["bias"]
        return v

    def apply(self, variables, x):
        p = dict(variables["params"])
        for n, name in enumerate(self.layer_names()):
            w = p.pop(f"w{n + 1}")
            p[name] = {"kernel": w.T if self.torch_layout else w, "bias": p.pop(f"b{n + 1}")}
        return super().apply({**variables, "params": p}, x)


class TorchLayoutWeights(ExplicitWeights):
    """Correct: a port that kept PyTorch's ``[out, in]`` weights (``x @ w1.T``)."""

    torch_layout = True


class Float16Weights(FIRE):
    """f_θ's kernels and biases held in float16 (``nn.Dense(param_dtype=jnp.float16)``), c and
    L_multiplier in float32; it computes in float32 (``x @ kernel`` promotes): its bias is the
    reference's with f_θ's parameters rounded to float16 (audit 21 F10: it had been said to be a
    shift per query row)."""

    def init(self, rng, x):
        v = super().init(rng, x)
        for name in self.layer_names():
            v["params"][name] = {k: w.astype(jnp.float16) for k, w in v["params"][name].items()}
        return v


class Bfloat16Weights(FIRE):
    """f_θ's kernels and biases held in bfloat16 (Flax's ``param_dtype=jnp.bfloat16``), computing
    in float32: most failing cases are the reference's with them so rounded, a few (gradients)
    only within bf16's precision (audit 37: the run-level line had named nothing)."""

    def init(self, rng, x):
        v = super().init(rng, x)
        for name in self.layer_names():
            v["params"][name] = {k: w.astype(jnp.bfloat16) for k, w in v["params"][name].items()}
        return v


class CFloat16(FIRE):
    """c held in float16 (``self.param("c", init, (), jnp.float16)``), the rest in float32: it
    holds its init_c as float16 rounds it, which is no argument ignored, and its bias is the
    reference's with c so rounded (audit 22: it had been told its constructor ignores init_c)."""

    def init(self, rng, x):
        v = super().init(rng, x)
        v["params"]["c"] = v["params"]["c"].astype(jnp.float16)
        return v


class NoLinenInterface:
    """FIRE as a plain callable with its parameters as attributes (flax.nnx's style): no
    ``init``/``apply``, so the glue refuses it before any case, naming the interface."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        self.num_heads = num_heads

    def __call__(self, x):
        raise NotImplementedError


class BiasesApart(FIRE):
    """Each layer's ``kernel`` without a bias beside it, the biases parameters of their own
    (``b0``, ``b1`` at the top of the tree, as ``self.param`` beside ``Dense(use_bias=False)``
    makes them), added by the module: a correct FIRE."""

    hidden_bias = output_bias = False

    def extra_params(self):
        return {"b0": jnp.zeros(self.mlp_width), "b1": jnp.zeros(self.num_heads)}

    def layer_bias(self, p, n, name):
        return p[f"b{n}"]


class OneOutputForEveryHead(FIRE):
    """f_θ with one output, broadcast over the heads (every head the same bias; a module that
    tells them apart elsewhere, a threshold per head, is no closer): not FIRE's f_θ: ℝ → ℝ^H."""

    outputs = 1

    def finish(self, bias, p):
        return jnp.broadcast_to(bias, (1, self.num_heads) + bias.shape[2:])


class BiasesApartOutputOnly(BiasesApart):
    """``BiasesApart`` whose hidden bias is never added (``b0`` made but unused): the catalogue's
    ``hidden-bias-missing``."""

    def layer_bias(self, p, n, name):
        return p["b1"] if n == 1 else 0.0


class ArgumentsNamedOtherwise(FIRE):
    """Appendix E with its constructor's arguments named otherwise (``heads``, ``hidden``,
    ``c0``, ``L0``): reached with ``--map-arg``."""

    def __init__(self, heads=12, hidden=32, c0=0.1, L0=512.0, eps=1e-6):
        super().__init__(heads, hidden, c0, L0, eps)


class NoEpsArgument(FIRE):
    """Appendix E with ε fixed at the spec's 10⁻⁶ (no ``eps`` argument): a correct FIRE that
    cannot be given another ε."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0):
        super().__init__(num_heads, mlp_width, init_c, init_L, 1e-6)


class ShapeArgumentsOnly(FIRE):
    """Appendix E whose constructor takes the shape alone (c and L_init start at the spec's
    values, ε fixed): a correct FIRE whose initial values the glue loads over."""

    def __init__(self, num_heads=12, mlp_width=32):
        super().__init__(num_heads, mlp_width)


class NoEpsArgumentOtherEps(FIRE):
    """A constructor without ``eps`` whose fixed ε is 10⁻³, not the spec's 10⁻⁶."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0):
        super().__init__(num_heads, mlp_width, init_c, init_L, 1e-3)


class TwoHiddenBiasesApart(TwoHidden):
    """Appendix B's approximator with its biases apart from its layers, made output first
    (``b2``, ``b1``, ``b0``): the two hidden ones are as wide, and their names number them."""

    hidden_bias = output_bias = False
    # The names of the biases, first layer first.
    bias_names = ("b0", "b1", "b2")

    def extra_params(self):
        widths = (self.mlp_width, self.mlp_width, self.num_heads)
        return {name: jnp.zeros(w) for name, w in reversed(list(zip(self.bias_names, widths)))}

    def layer_bias(self, p, n, name):
        return p[self.bias_names[n]]


class TwoHiddenBiasesNamed(TwoHiddenBiasesApart):
    """``TwoHiddenBiasesApart`` whose biases are named by role (``bias_in``, ``bias_hidden``,
    ``bias_out``), made first layer first: the tree's order says which hidden bias is which."""

    bias_names = ("bias_in", "bias_hidden", "bias_out")

    def extra_params(self):
        widths = (self.mlp_width, self.mlp_width, self.num_heads)
        return {name: jnp.zeros(w) for name, w in zip(self.bias_names, widths)}


class ThresholdAttribute(FIRE):
    """A constructor without ``init_L`` whose threshold L_init = 512 is a plain attribute, which
    no case value reaches: a correct FIRE graded at the spec's L_init."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, 512.0, eps)

    def init(self, rng, x):
        variables = super().init(rng, x)
        return {"params": variables["params"]}

    def apply(self, variables, x):
        return super().apply({**variables, "constants": {"init_L": jnp.asarray(512.0)}}, x)


class PositionalOnly(FIRE):
    """Appendix E whose constructor takes the shape by position only."""

    def __init__(self, num_heads=12, mlp_width=32, /, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)


class HeadBiasBroadcast(FIRE):
    """The output layer without a bias, the heads' bias a ``[H, 1, 1]`` parameter added to the
    head-first bias: a correct FIRE."""

    output_bias = False

    def extra_params(self):
        return {"head_bias": jnp.zeros((self.num_heads, 1, 1))}

    def finish(self, bias, p):
        return bias + p["head_bias"]


class TokenIds(FIRE):
    """Appendix E called as nanoGPT calls its model: ``apply(variables, idx)`` with ``idx`` a batch
    of token ids [B, T], read only for its length."""

    def init(self, rng, idx):
        B, T = idx.shape
        return super().init(rng, jnp.zeros((B, 1, T, 1)))

    def apply(self, variables, idx):
        B, T = idx.shape
        return super().apply(variables, jnp.zeros((B, 1, T, 1)))


class ThresholdAttributeGiven(FIRE):
    """Takes ``init_L`` and keeps it as a plain attribute, which nothing the glue loads holds: a
    correct FIRE, reached through its constructor only."""

    def init(self, rng, x):
        variables = super().init(rng, x)
        return {"params": variables["params"]}

    def apply(self, variables, x):
        return super().apply({**variables, "constants": {"init_L": jnp.asarray(self.init_L)}}, x)


class ThresholdAttributeMasked(ThresholdAttributeGiven):
    """``ThresholdAttributeGiven`` masking the keys after the query with ``finfo.min`` (declared
    ``masked``): the probes built anew must compare the bias, not the mask, whose magnitude
    would make every bias the same to its rounding (audit 31)."""

    def apply(self, variables, x):
        b = super().apply(variables, x)
        T = b.shape[-1]
        return jnp.where(jnp.tril(jnp.ones((T, T), bool)), b, jnp.finfo(b.dtype).min)


class ThresholdAttributeMaskedIgnored(ThresholdAttributeMasked):
    """``ThresholdAttributeMasked`` whose constructor keeps 512 whatever ``init_L`` it is given."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, 512.0, eps)


class ThresholdAttributeIgnored(ThresholdAttributeGiven):
    """``ThresholdAttributeGiven`` whose constructor takes ``init_L`` and keeps 512 whatever it
    is given."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, 512.0, eps)


class ThresholdAttributeMin(ThresholdAttributeGiven):
    """``ThresholdAttributeGiven`` normalising by min(i, L) (the catalogue's
    ``threshold-as-min``): with L past every position its bias is the same whatever L, yet it
    takes the argument (a lower L changes it), so it is named by its values, not as keeping a
    threshold of its own (audit 33)."""

    def thresholded(self, queries, threshold):
        return jnp.minimum(queries, threshold)


class FromConfig(FIRE):
    """Correct, built from one config object that it reads only when initialised, as a Flax linen
    module reads its config field in ``setup``."""

    def __init__(self, config):
        self.config = config

    def read(self, config):
        return config.fire_init_L

    def init(self, rng, x):
        cfg = self.config
        self.num_heads, self.mlp_width = cfg.num_attention_heads, cfg.fire_mlp_width
        self.init_c, self.init_L = cfg.fire_init_c, self.read(cfg)
        self.eps = getattr(cfg, "fire_eps", 1e-6)
        return super().init(rng, x)


class FromConfigKeepsOwnL(FromConfig):
    """Built from one config object, whose ``fire_init_L`` it reads and replaces by 512."""

    def read(self, config):
        return 512.0 + 0 * config.fire_init_L


class TrainingFlag(FIRE):
    """Correct, its call taking Flax's training flag (``deterministic=True`` by default), which
    changes nothing."""

    training = False

    def apply(self, variables, x, deterministic=True):
        self.training = not deterministic
        return super().apply(variables, x)


class DetachedInTraining(TrainingFlag):
    """Right in evaluation; given ``deterministic=False``, as training calls it, its ψ of the
    distances is kept out of the gradient (``jax.lax.stop_gradient``): c's gradient is wrong
    only where the model learns."""

    def psi_of_distances(self, c, rel_distance):
        psi = super().psi_of_distances(c, rel_distance)
        return jax.lax.stop_gradient(psi) if self.training else psi


class PastLength(FIRE):
    """Correct, Hugging Face's decoding step in JAX: ``apply(variables, hidden_states,
    past_key_values_length=0)``, the new tokens at past..past+T-1 over every key 0..past+T-1.
    ``keys_from_zero``: the keys counted over the new tokens alone."""

    keys_from_zero = False

    def apply(self, variables, hidden_states, past_key_values_length=0):
        T, past = hidden_states.shape[1], past_key_values_length
        queries = jnp.arange(past, past + T, dtype=jnp.float32)
        keys = jnp.arange(T if self.keys_from_zero else past + T, dtype=jnp.float32)
        return self.bias(variables, queries, keys)


class PastLengthKeysFromZero(PastLength):
    """With a cache, the keys counted from the new tokens: the offset never reaches the keys,
    which a call without a cache cannot show."""

    keys_from_zero = True
