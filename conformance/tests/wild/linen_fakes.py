"""FIRE written as a ``flax.linen`` module (``nn.compact``, ``self.param``, ``nn.Dense``) whose
call takes Flax's training flag and puts an ``nn.Dropout`` on the bias, as Flax models do:
correct, and detached only in training. Driven by tests/wild_jax.rs through the JAX glue.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np


class FIRE(nn.Module):
    """Appendix E in linen, with a dropout on the bias that ``deterministic=True`` turns off."""

    num_heads: int = 12
    mlp_width: int = 32
    init_c: float = 0.1
    init_L: float = 512.0
    eps: float = 1e-6

    def normaliser(self, c, L_multiplier, init_L, positions, deterministic):
        threshold = jnp.abs(L_multiplier * init_L)
        return jnp.log(jnp.abs(c * jnp.maximum(positions, threshold)) + 1) + self.eps

    @nn.compact
    def __call__(self, x, deterministic: bool = True):
        c = self.param("c", lambda _: jnp.asarray(self.init_c))
        L_multiplier = self.param("L_multiplier", lambda _: jnp.asarray(1.0))
        init_L = self.variable("constants", "init_L", lambda: jnp.asarray(self.init_L)).value
        positions = jnp.arange(x.shape[2], dtype=x.dtype)
        rel_distance = jnp.log(jnp.abs(c * (positions[:, None] - positions[None, :])) + 1)
        normaliser = self.normaliser(c, L_multiplier, init_L, positions, deterministic)
        normalized = (rel_distance / normaliser[:, None])[..., None]
        hidden = nn.relu(nn.Dense(self.mlp_width, param_dtype=x.dtype)(normalized))
        bias = nn.Dense(self.num_heads, param_dtype=x.dtype)(hidden)
        bias = nn.Dropout(0.1)(bias, deterministic=deterministic)
        return jnp.transpose(bias, (2, 0, 1))[None]


class DetachedInTraining(FIRE):
    """The normaliser kept out of the gradient (``jax.lax.stop_gradient``) when training
    (``deterministic=False``): right in evaluation, where the bias is graded; with the dropout,
    training's output changed from call to call and had not been compared (audit 34)."""

    def normaliser(self, c, L_multiplier, init_L, positions, deterministic):
        out = super().normaliser(c, L_multiplier, init_L, positions, deterministic)
        return out if deterministic else jax.lax.stop_gradient(out)


class TrainRequired(FIRE):
    """Correct, its call requiring ``train`` by keyword, no default (every case had stopped on
    the missing argument, audit 34)."""

    @nn.compact
    def __call__(self, x, *, train: bool):
        return FIRE.__call__(self, x, deterministic=not train)


class TrainRequiredDetached(DetachedInTraining):
    """``DetachedInTraining`` called with a required ``train``."""

    @nn.compact
    def __call__(self, x, *, train: bool):
        return FIRE.__call__(self, x, deterministic=not train)


class MergedFlag(FIRE):
    """Correct, Hugging Face Flax's way: ``deterministic`` an optional field and an optional call
    argument, merged by ``nn.merge_param``, which raises where neither gives it (every case had
    stopped there, audit 34)."""

    deterministic: bool | None = None

    @nn.compact
    def __call__(self, x, deterministic: bool | None = None):
        deterministic = nn.merge_param("deterministic", self.deterministic, deterministic)
        return FIRE.__call__(self, x, deterministic=deterministic)


class MergedFlagDetached(DetachedInTraining):
    """``DetachedInTraining`` with the flag merged as ``MergedFlag`` merges it."""

    deterministic: bool | None = None

    @nn.compact
    def __call__(self, x, deterministic: bool | None = None):
        deterministic = nn.merge_param("deterministic", self.deterministic, deterministic)
        return FIRE.__call__(self, x, deterministic=deterministic)


def noisy(module, x, deterministic):
    """FIRE's bias and, in training, a noise from the module's own rng stream
    (``make_rng("noise")``) scaled by its ``noise_std``."""
    bias = FIRE.__call__(module, x, deterministic=deterministic)
    if deterministic:
        return bias
    return bias + module.noise_std * jax.random.normal(module.make_rng("noise"), bias.shape)


class NoiseStream(FIRE):
    """Correct, drawing from an rng stream of its own in training, its noise scaled by
    ``noise_std`` (0 here, so training's bias is evaluation's)."""

    noise_std: float = 0.0

    @nn.compact
    def __call__(self, x, deterministic: bool = True):
        return noisy(self, x, deterministic)


class NoiseStreamDetached(DetachedInTraining):
    """``DetachedInTraining`` drawing from the ``noise`` stream in training as ``NoiseStream``
    does: the training call had failed for want of the stream, and nothing was compared (audit
    34)."""

    noise_std: float = 0.0

    @nn.compact
    def __call__(self, x, deterministic: bool = True):
        return noisy(self, x, deterministic)


class NoisyInTraining(NoiseStream):
    """Correct, with a real noise on the bias in training: its training output changes from
    call to call; with its keys fixed, the gradients it sends c and the multiplier are its
    training call's own derivative."""

    noise_std: float = 0.1


class NoisyInTrainingDetached(NoiseStreamDetached):
    """``DetachedInTraining`` under a real noise: its training output random, the detach had
    passed with a note (audit 34); with the keys fixed, c's gradient is not the derivative of
    the training call's own output."""

    noise_std: float = 0.1


class MaskedInTraining(FIRE):
    """Correct, a mask of its own in training (``bias * bernoulli / keep`` from the ``noise``
    stream): multiplicative, so its gradients are not evaluation's, yet they are its own
    call's derivative."""

    @nn.compact
    def __call__(self, x, deterministic: bool = True):
        bias = FIRE.__call__(self, x, deterministic=deterministic)
        if deterministic:
            return bias
        keep = jax.random.bernoulli(self.make_rng("noise"), 0.8, bias.shape)
        return bias * keep / 0.8


class HostNoiseInTraining(FIRE):
    """Correct, its training noise drawn on the host (``numpy.random``), which no key fixes:
    not compared, and the run says so."""

    @nn.compact
    def __call__(self, x, deterministic: bool = True):
        bias = FIRE.__call__(self, x, deterministic=deterministic)
        if deterministic:
            return bias
        return bias + 0.1 * np.random.default_rng().standard_normal(bias.shape)


class LongDetached(FIRE):
    """Past 1 024 positions the normaliser under ``jax.lax.stop_gradient`` (a Python branch on
    the static length): every gradient case is a small square, and passed."""

    def normaliser(self, c, L_multiplier, init_L, positions, deterministic):
        out = super().normaliser(c, L_multiplier, init_L, positions, deterministic)
        return jax.lax.stop_gradient(out) if positions.shape[0] > 1024 else out


class LongDetachedInTraining(FIRE):
    """Memory saved in training the wrong way (audit 37): in training (``deterministic=False``)
    past 1 024 positions the normaliser under ``stop_gradient``; evaluation, and training on the
    small squares, are FIRE's."""

    def normaliser(self, c, L_multiplier, init_L, positions, deterministic):
        out = super().normaliser(c, L_multiplier, init_L, positions, deterministic)
        return jax.lax.stop_gradient(out) if positions.shape[0] > 1024 and not deterministic else out
