"""FIRE written with Haiku (an ``hk.Module`` built and called inside ``hk.transform``, its
parameters made by ``hk.get_parameter``, ``hk.Linear``'s ``w`` stored ``[in, out]``): Appendix E
with ``hk.Linear`` layers and with ``hk.nets.MLP``, and the mistakes Haiku invites: a ``c`` kept
in ``hk.get_state`` (never trained), a ψ table made in ``__init__`` from ``init_c``, a bias cached
at module level (a Haiku module lives for one call), positions counted from 1. Driven by
tests/wild_jax_apis.rs through the Appendix E glue, which hands Haiku modules to
``fire_conformance.jax_glue`` (``haiku_bridge``).
"""

import haiku as hk
import jax
import jax.numpy as jnp


class FIRE(hk.Module):
    """Appendix E in Haiku; the subclasses change one thing each."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6, name=None):
        super().__init__(name=name)
        self.num_heads, self.mlp_width = num_heads, mlp_width
        self.init_c, self.init_L, self.eps = init_c, init_L, eps

    def scalar(self, name, value):
        return hk.get_parameter(name, [], init=hk.initializers.Constant(value))

    def positions(self, seq_length):
        return jnp.arange(seq_length, dtype=jnp.float32)

    def psi(self, c, x):
        return jnp.log(jnp.abs(c * x) + 1)

    def mlp(self, x):
        h = jax.nn.relu(hk.Linear(self.mlp_width)(x))
        return hk.Linear(self.num_heads)(h)

    def __call__(self, x):
        c = self.scalar("c", self.init_c)
        multiplier = self.scalar("L_multiplier", 1.0)
        positions = self.positions(x.shape[2])
        rel_distance = positions[:, None] - positions[None, :]
        threshold = jnp.abs(multiplier * self.init_L)
        pos_normalizer = jnp.maximum(positions, threshold)[:, None]
        normalized = self.psi(c, rel_distance) / (self.psi(c, pos_normalizer) + self.eps)
        return jnp.transpose(self.mlp(normalized[..., None]), (2, 0, 1))[None]


class NetsMLP(FIRE):
    """Correct: f_θ as ``hk.nets.MLP`` (its layers nested a module deeper)."""

    def mlp(self, x):
        return hk.nets.MLP([self.mlp_width, self.num_heads])(x)


class CInState(FIRE):
    """``c`` kept with ``hk.get_state``: right on values, but an optimiser over ``params`` never
    trains it."""

    def scalar(self, name, value):
        if name != "c":
            return super().scalar(name, value)
        return hk.get_state(name, [], init=hk.initializers.Constant(value))


class PsiTableFromInitC(FIRE):
    """A ψ table made from ``init_c`` (a constant of the module, not its parameter ``c``): right
    while c is where it started, never after training or a checkpoint."""

    def psi(self, c, x):
        return jnp.log(abs(self.init_c) * jnp.abs(x) + 1)


_CACHE = {}


class CachesBiasGlobally(FIRE):
    """The bias cached at module level under the length: a Haiku module lives for one call, so
    a cache lives outside it, and every step after the first reads the first step's bias."""

    def __call__(self, x):
        key = x.shape[2]
        if key not in _CACHE:
            _CACHE[key] = super().__call__(x)
        return _CACHE[key]


class OneBasedPositions(FIRE):
    """Positions counted from 1 (the catalogue's `one-based-positions`)."""

    def positions(self, seq_length):
        return jnp.arange(1, seq_length + 1, dtype=jnp.float32)


class TrainingFlagAndDropout(FIRE):
    """Correct, in Haiku's own style: ``__call__(x, is_training)`` with no default, and a dropout
    that always draws a key, at rate 0 when not training (the glue had refused it: no
    ``is_training`` given, no random key)."""

    def __call__(self, x, is_training):
        self.is_training = is_training
        return super().__call__(x)

    def mlp(self, x):
        h = jax.nn.relu(hk.Linear(self.mlp_width)(x))
        h = hk.dropout(hk.next_rng_key(), 0.1 if self.is_training else 0.0, h)
        return hk.Linear(self.num_heads)(h)


class TorchLayoutLinear(hk.Module):
    """A layer written by hand whose ``w`` keeps PyTorch's ``[out, in]`` (``x @ w.T``)."""

    def __init__(self, out_features, name=None):
        super().__init__(name=name)
        self.out_features = out_features

    def __call__(self, x):
        w = hk.get_parameter("w", [self.out_features, x.shape[-1]],
                             init=hk.initializers.TruncatedNormal(1.0))
        b = hk.get_parameter("b", [self.out_features], init=jnp.zeros)
        return x @ w.T + b


class TorchLayoutW(FIRE):
    """Correct: hand-written layers whose ``w`` is ``[out, in]``, not ``hk.Linear``'s
    ``[in, out]`` (every case had been skipped: the layers did not compose)."""

    def mlp(self, x):
        h = jax.nn.relu(TorchLayoutLinear(self.mlp_width, name="fc1")(x))
        return TorchLayoutLinear(self.num_heads, name="fc2")(h)


class BiasKeptInState(FIRE):
    """The bias computed on the first call and kept in ``hk.get_state``: a program carrying the
    state from step to step (``out, state = apply(params, state, …)``) reads the first step's
    bias ever after (it had passed: the glue dropped the state each call returned)."""

    def __call__(self, x):
        bias = super().__call__(x)
        filled = hk.get_state("filled", [], jnp.bool_, init=jnp.zeros)
        kept = hk.get_state("bias", bias.shape, bias.dtype, init=jnp.zeros)
        out = jnp.where(filled, jax.lax.stop_gradient(kept), bias)
        hk.set_state("bias", out)
        hk.set_state("filled", jnp.ones([], jnp.bool_))
        return out


class OffsetInState(FIRE):
    """A decoding offset kept in ``hk.get_state`` and advanced by the length on every call: the
    second call's positions start past the first's."""

    def positions(self, seq_length):
        offset = hk.get_state("offset", [], jnp.float32, init=jnp.zeros)
        hk.set_state("offset", offset + seq_length)
        return jnp.arange(seq_length, dtype=jnp.float32) + offset


class BiasModules(FIRE):
    """Correct: each layer an ``hk.Linear(with_bias=False)`` followed by an ``hk.Bias`` over its
    last axis (the bias a module of its own)."""

    def mlp(self, x):
        h = hk.Linear(self.mlp_width, with_bias=False)(x)
        h = jax.nn.relu(hk.Bias(bias_dims=[-1])(h))
        return hk.Bias(bias_dims=[-1])(hk.Linear(self.num_heads, with_bias=False)(h))


class DetachedInTraining(FIRE):
    """Right in evaluation; given ``is_training=True``, as training calls it, its ψ is kept out
    of the gradient (``jax.lax.stop_gradient``): c's gradient is wrong only where the model
    learns."""

    def __call__(self, x, is_training):
        self.is_training = is_training
        return super().__call__(x)

    def psi(self, c, x):
        psi = super().psi(c, x)
        return jax.lax.stop_gradient(psi) if self.is_training else psi


class DetachedInTrainingWithDropout(DetachedInTraining):
    """``DetachedInTraining`` with ``hk.dropout`` on f_θ's hidden layer in training: training's
    output then changes from call to call, which had kept the detached ψ from being compared
    (audit 34)."""

    def mlp(self, x):
        h = jax.nn.relu(hk.Linear(self.mlp_width)(x))
        if self.is_training:
            h = hk.dropout(hk.next_rng_key(), 0.1, h)
        return hk.Linear(self.num_heads)(h)
