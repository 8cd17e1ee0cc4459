"""FIRE written with Equinox (an immutable ``eqx.Module`` pytree, built with a ``key``, called
directly, every floating array trained): Appendix E with ``eqx.nn.MLP`` (PyTorch's ``[out, in]``
weights) and an ``init_L`` kept as a Python float, and the mistakes Equinox invites: a ``c``
kept as a Python float (never trained), a ψ table made in ``__init__`` from ``init_c`` (a
floating array, so it trains as a parameter no case value reaches), positions counted from 1,
and Equinox's two inference switches (an ``inference`` field, which ``eqx.nn.inference_mode``
sets, and an ``inference`` call argument) with a path only training takes.
Driven by tests/wild_jax.rs through the Appendix E glue, which hands Equinox modules to
``fire_conformance.jax_glue`` (``equinox_bridge``).
"""

import equinox as eqx
import jax
import jax.numpy as jnp


class FIRE(eqx.Module):
    """Appendix E in Equinox; the subclasses change one thing each."""

    mlp: eqx.nn.MLP
    c: jax.Array
    L_multiplier: jax.Array
    init_L: float
    eps: float = eqx.field(static=True)

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6, *, key):
        self.mlp = eqx.nn.MLP(1, num_heads, mlp_width, depth=1, activation=jax.nn.relu, key=key)
        self.c = self.scalar(init_c)
        self.L_multiplier = jnp.asarray(1.0, dtype=jnp.float32)
        self.init_L = init_L
        self.eps = eps

    def scalar(self, value):
        return jnp.asarray(value, dtype=jnp.float32)

    def positions(self, seq_length):
        return jnp.arange(seq_length, dtype=jnp.float32)

    def psi_of_distances(self, rel_distance):
        return jnp.log(jnp.abs(self.c * rel_distance) + 1)

    def normalized(self, x):
        """The MLP's input, ψ(i − j) / (ψ(max(L, i)) + ε), as [T, T]."""
        positions = self.positions(x.shape[2])
        rel_distance = positions[:, None] - positions[None, :]
        threshold = jnp.abs(self.L_multiplier * self.init_L)
        pos_normalizer = jnp.maximum(positions, threshold)[:, None]
        pos_normalizer = jnp.log(jnp.abs(self.c * pos_normalizer) + 1) + self.eps
        return self.psi_of_distances(rel_distance) / pos_normalizer

    def mlp_of(self, normalized):
        seq_length = normalized.shape[0]
        return jax.vmap(self.mlp)(normalized.reshape(-1, 1)).reshape(seq_length, seq_length, -1)

    def __call__(self, x):
        return jnp.transpose(self.mlp_of(self.normalized(x)), (2, 0, 1))[None]


class OneSequence(FIRE):
    """Correct, written for one example as Equinox code is (vmapped over the batch by its
    caller): x is one sequence of hidden states [T, D], its length read from x.shape[0]."""

    def __call__(self, x):
        seq = jnp.zeros((1, 1, x.shape[0], 1))
        return jnp.transpose(self.mlp_of(self.normalized(seq)), (2, 0, 1))


class CAsFloat(FIRE):
    """``c`` kept as a Python float: right on values, but ``eqx.filter_grad`` never trains it."""

    def scalar(self, value):
        return float(value)


class OneBasedPositions(FIRE):
    """Positions counted from 1 (the catalogue's `one-based-positions`)."""

    def positions(self, seq_length):
        return jnp.arange(1, seq_length + 1, dtype=jnp.float32)


class PositionsStopGradient(FIRE):
    """Correct: a table of positions kept as a floating array, which Equinox would train, read
    through ``jax.lax.stop_gradient`` (the glue had refused it as a parameter no case value
    reaches)."""

    positions_table: jax.Array

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6, *, key):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps, key=key)
        self.positions_table = jnp.arange(4096, dtype=jnp.float32)

    def positions(self, seq_length):
        return jax.lax.stop_gradient(self.positions_table)[:seq_length]


class OneSequencePositionsStopGradient(PositionsStopGradient):
    """Correct: the table of positions read through ``jax.lax.stop_gradient``, in a module
    reading one sequence ``[T, D]`` (audit 38: refused as a parameter the bias has a gradient
    in, the glue having tried the table's gradient on a batch the module cannot read)."""

    def __call__(self, x):
        seq = jnp.zeros((1, 1, x.shape[0], 1))
        return jnp.transpose(self.mlp_of(self.normalized(seq)), (2, 0, 1))


class PsiTableStopGradient(FIRE):
    """A ψ table made in ``__init__`` from ``init_c``, read through ``jax.lax.stop_gradient``:
    right while c is where it started, never after training or a checkpoint."""

    psi_table: jax.Array

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6, *, key):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps, key=key)
        self.psi_table = jnp.log(abs(init_c) * jnp.arange(4096, dtype=jnp.float32) + 1)

    def psi_of_distances(self, rel_distance):
        return jax.lax.stop_gradient(self.psi_table)[jnp.abs(rel_distance).astype(jnp.int32)]


class HandWrittenLinear(eqx.Module):
    """A linear layer written by hand: ``weight`` stored ``[in, out]``, ``x @ weight``."""

    weight: jax.Array
    bias: jax.Array

    def __init__(self, n_in, n_out, key):
        self.weight = jax.random.normal(key, (n_in, n_out)) / n_in**0.5
        self.bias = jnp.zeros(n_out)

    def __call__(self, x):
        return x @ self.weight + self.bias


class HandWrittenLayers(FIRE):
    """Correct: the MLP of two hand-written layers whose ``weight`` is ``[in, out]``, not
    Equinox's ``[out, in]`` (every case had been skipped: the shapes did not compose)."""

    hidden: HandWrittenLinear
    out: HandWrittenLinear

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6, *, key):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps, key=key)
        k1, k2 = jax.random.split(key)
        self.hidden = HandWrittenLinear(1, mlp_width, k1)
        self.out = HandWrittenLinear(mlp_width, num_heads, k2)
        self.mlp = None

    def mlp_of(self, normalized):
        return self.out(jax.nn.relu(self.hidden(normalized[..., None])))


class LogC(FIRE):
    """Correct, but ``c`` held as ``log c`` under its own name (exponentiated in ``__call__``): a
    transform of ``init_c`` the glue cannot load a case's c into, refused saying so (it had
    failed as a constructor ignoring ``init_c``)."""

    def scalar(self, value):
        return jnp.log(jnp.asarray(value, dtype=jnp.float32))

    def __call__(self, x):
        return FIRE.__call__(eqx.tree_at(lambda m: m.c, self, jnp.exp(self.c)), x)


class CStatic(FIRE):
    """``c`` declared a static field: right on values, but a static field is no leaf, so
    Equinox never trains it (the glue had refused the module, finding no `c`)."""

    c: float = eqx.field(static=True)

    def scalar(self, value):
        return float(value)


_NORMALISERS = {}


class NormaliserCachedGlobally(FIRE):
    """The normaliser ψ(max(i, L)) + ε cached in a dict at module level under the length: the
    first call's c and multiplier for every later call (a twin built anew shares the dict, so
    only the file imported afresh shows it)."""

    def normalized(self, x):
        positions = self.positions(x.shape[2])
        rel_distance = positions[:, None] - positions[None, :]
        length = x.shape[2]
        if length not in _NORMALISERS:
            threshold = jnp.abs(self.L_multiplier * self.init_L)
            pos_normalizer = jnp.maximum(positions, threshold)
            _NORMALISERS[length] = jnp.log(jnp.abs(self.c * pos_normalizer) + 1) + self.eps
        return self.psi_of_distances(rel_distance) / _NORMALISERS[length][:, None]


_POSITIONS = {}


class PositionsCachedGlobally(FIRE):
    """Correct: the positions cached at module level under the length, which is all they
    depend on."""

    def positions(self, seq_length):
        if seq_length not in _POSITIONS:
            _POSITIONS[seq_length] = jnp.arange(seq_length, dtype=jnp.float32)
        return _POSITIONS[seq_length]


class InferenceField(FIRE):
    """Correct, with an ``inference`` field left at its class default by the constructor (so
    ``eqx.nn.inference_mode`` refuses it: no leaf) and a call taking ``key``: graded as built
    (the glue had stopped on every case with inference_mode's TypeError)."""

    inference: bool = False

    def __call__(self, x, *, key=None):
        return super().__call__(x)


class DetachedInTrainingField(FIRE):
    """An ``inference`` field its constructor sets, and the MLP's input detached in training
    (``inference`` False): right in inference mode, where the bias is graded; c and the
    multiplier never learn."""

    inference: bool

    def __init__(self, *args, inference=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.inference = inference

    def normalized(self, x):
        out = super().normalized(x)
        return out if self.inference else jax.lax.stop_gradient(out)


class DetachedInTrainingArgument(FIRE):
    """``inference=True`` by default in its call, and the MLP's input detached when called with
    ``inference=False``, as training calls it."""

    def __call__(self, x, *, key=None, inference=True):
        normalized = self.normalized(x)
        if not inference:
            normalized = jax.lax.stop_gradient(normalized)
        return jnp.transpose(self.mlp_of(normalized), (2, 0, 1))[None]


class DropoutInTraining(FIRE):
    """Correct: an ``eqx.nn.Dropout`` on the bias, off in inference mode (the graded call), a
    fresh mask per training call, which the glue's training call turns off (``p = 0``)."""

    dropout: eqx.nn.Dropout

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.dropout = eqx.nn.Dropout(0.1)

    def __call__(self, x, *, key=None):
        return self.dropout(super().__call__(x), key=key)


class DropoutKeyRequired(DropoutInTraining):
    """Correct: the same dropout, the call requiring its ``key`` as a model with a dropout has
    it (every case had stopped on the missing argument)."""

    def __call__(self, x, *, key):
        return self.dropout(FIRE.__call__(self, x), key=key)


class DetachedInTrainingWithDropout(DetachedInTrainingField):
    """``DetachedInTrainingField`` with an ``eqx.nn.Dropout`` on the bias, on in training (a key
    per call): training's output then changes from call to call, which had kept the detached
    normaliser from being compared (audit 34)."""

    dropout: eqx.nn.Dropout

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.dropout = eqx.nn.Dropout(0.1)

    def __call__(self, x, *, key=None):
        return self.dropout(super().__call__(x), key=key, inference=self.inference)
