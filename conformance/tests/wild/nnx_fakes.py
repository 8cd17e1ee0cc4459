"""FIRE written with ``flax.nnx`` (parameters as ``nnx.Param`` attributes, ``rngs`` at
construction, the module called directly), as JAX code is written since Flax made NNX its API:
Appendix E itself and its layouts (``nnx.Sequential``, named layers, scalars kept as ``[1]``),
and the mistakes NNX invites: a ``c`` held as a plain ``nnx.Variable`` (never trained by an
optimiser over ``nnx.Param``), a ψ table made in ``__init__`` from ``init_c``, a bias cached in
an ``nnx.data`` attribute, positions counted from 1. Driven by tests/wild_jax.rs through the
Appendix E glue, which hands NNX modules to ``fire_conformance.jax_glue`` (``nnx_bridge``).
"""

import jax
import jax.numpy as jnp
from flax import nnx


class FIRE(nnx.Module):
    """Appendix E in NNX; the subclasses change one thing each."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6, *,
                 rngs: nnx.Rngs):
        self.mlp = nnx.Sequential(nnx.Linear(1, mlp_width, rngs=rngs), nnx.relu,
                                  nnx.Linear(mlp_width, num_heads, rngs=rngs))
        self.c = self.scalar(init_c)
        self.init_L = nnx.Variable(jnp.asarray(init_L, dtype=jnp.float32))
        self.L_multiplier = nnx.Param(jnp.asarray(1.0, dtype=jnp.float32))
        self.eps = eps

    def scalar(self, value):
        return nnx.Param(jnp.asarray(value, dtype=jnp.float32))

    def positions(self, seq_length, dtype):
        return jnp.arange(seq_length, dtype=dtype)

    def psi_of_distances(self, rel_distance):
        return jnp.log(jnp.abs(self.c[...] * rel_distance) + 1)

    def mlp_of(self, h):
        return self.mlp(h)

    def threshold(self):
        return jnp.abs(self.L_multiplier[...] * self.init_L[...])

    def __call__(self, x):
        c = self.c[...].reshape(())
        positions = self.positions(x.shape[2], x.dtype)
        rel_distance = positions[:, None] - positions[None, :]
        pos_normalizer = jnp.maximum(positions, self.threshold())[:, None]
        rel_distance = self.psi_of_distances(rel_distance)
        pos_normalizer = jnp.log(jnp.abs(c * pos_normalizer) + 1) + self.eps
        h = self.mlp_of((rel_distance / pos_normalizer)[..., None])
        return jnp.transpose(h, (2, 0, 1))[None]


class NamedLayers(FIRE):
    """The MLP as two named ``nnx.Linear`` attributes, the scalars kept as ``[1]``."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6, *,
                 rngs: nnx.Rngs):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps, rngs=rngs)
        del self.mlp
        self.hidden = nnx.Linear(1, mlp_width, rngs=rngs)
        self.out = nnx.Linear(mlp_width, num_heads, rngs=rngs)

    def scalar(self, value):
        return nnx.Param(jnp.full((1,), value, dtype=jnp.float32))

    def mlp_of(self, h):
        return self.out(jax.nn.relu(self.hidden(h)))


class CAsVariable(FIRE):
    """``c`` held as a plain ``nnx.Variable``: right on values, but an optimiser built over
    ``nnx.Param`` (NNX's) never trains it."""

    def scalar(self, value):
        return nnx.Variable(jnp.asarray(value, dtype=jnp.float32))


class PsiTableFromInitC(FIRE):
    """The distances' ψ from a table made in ``__init__`` from ``init_c`` and held as an
    attribute: right while c is where it started, never after training or a checkpoint."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6, *,
                 rngs: nnx.Rngs):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps, rngs=rngs)
        self.psi_table = nnx.data(jnp.log(jnp.abs(init_c) * jnp.arange(4096.0) + 1))

    def psi_of_distances(self, rel_distance):
        return self.psi_table[jnp.abs(rel_distance).astype(jnp.int32)]


class CachesBias(FIRE):
    """The bias cached in an ``nnx.data`` attribute under the length, computed once: every
    step after the first reads the bias of the parameters of the first."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6, *,
                 rngs: nnx.Rngs):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps, rngs=rngs)
        self.cached = nnx.data(None)

    def __call__(self, x):
        if self.cached is None or self.cached.shape[-1] != x.shape[2]:
            self.cached = super().__call__(x)
        return self.cached


class CachesLongBias(FIRE):
    """The bias cached in an ``nnx.Cache`` under the length, only past 1 024 positions ("the
    long bias is expensive"), written during the call (under ``nnx.grad`` too): stale after a
    step at such a length, where the small cases' steps never reach (audit 38: it passed, the
    glue's ``jax.vjp`` refusing the write with a TraceContextError)."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6, *,
                 rngs: nnx.Rngs):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps, rngs=rngs)
        self.cached_bias = nnx.Cache(jnp.zeros((0,), jnp.float32))
        self.cached_len = nnx.Cache(jnp.asarray(-1, jnp.int32))

    def __call__(self, x):
        T = x.shape[2]
        if T > 1024 and int(self.cached_len[...]) == T:
            return self.cached_bias[...]
        b = super().__call__(x)
        if T > 1024:
            self.cached_bias.value = b
            self.cached_len.value = jnp.asarray(T, jnp.int32)
        return b


class PositionsTableParam(FIRE):
    """Correct: a table of positions kept as an ``nnx.Param`` and read through
    ``jax.lax.stop_gradient`` (audit 38: failed as a stale bias, the glue's step having scaled
    the table and the bridge never writing the module's own value back)."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6, *,
                 rngs: nnx.Rngs):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps, rngs=rngs)
        self.positions_table = nnx.Param(jnp.arange(4096, dtype=jnp.float32))

    def positions(self, seq_length, dtype):
        return jax.lax.stop_gradient(self.positions_table[...])[:seq_length].astype(dtype)


class OneBasedPositions(FIRE):
    """Positions counted from 1 (the catalogue's `one-based-positions`)."""

    def positions(self, seq_length, dtype):
        return jnp.arange(1, seq_length + 1, dtype=dtype)


class WithDropout(FIRE):
    """Correct: ``nnx.Dropout`` on the bias, off in evaluation mode (``model.eval()``), where the
    bias is read (the glue had graded it in training mode: random outputs blamed on x)."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6, *,
                 rngs: nnx.Rngs):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps, rngs=rngs)
        self.dropout = nnx.Dropout(0.1, rngs=rngs)

    def __call__(self, x):
        return self.dropout(super().__call__(x))


class ForwardsKwargs(FIRE):
    """Correct: a constructor that passes ``**kwargs`` on, ``rngs`` among them (the glue had
    withheld ``rngs`` from it)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)


class PythonFloatScalars(FIRE):
    """Correct: ``c`` and the multiplier held as Python floats in ``nnx.Param`` (which train as
    arrays do; the glue had crashed on them)."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6, *,
                 rngs: nnx.Rngs):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps, rngs=rngs)
        self.L_multiplier = nnx.Param(1.0)

    def scalar(self, value):
        return nnx.Param(float(value))


# A bias cache outside the module, keyed on the instance: the traced call of a gradient, merged
# anew from the module, misses it; every direct call after the first hits it.
_CACHE = {}


class CachesBiasGlobally(FIRE):
    """The bias cached in a module-level dict under ``(id(self), T)``: stale after any step (it
    had been blamed on x where the direct and the traced call disagreed)."""

    def __call__(self, x):
        key = (id(self), x.shape[2])
        if key not in _CACHE:
            _CACHE[key] = super().__call__(x)
        return _CACHE[key]


class CacheKeyedOnC(FIRE):
    """The bias cached under ``(T, float(c))``: recomputed when c changes, stale when only f_θ or
    the multiplier does (a frozen c, a checkpoint with the same c)."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6, *,
                 rngs: nnx.Rngs):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps, rngs=rngs)
        self.cache = nnx.data({})

    def __call__(self, x):
        try:
            key = (x.shape[2], float(self.c[...]))
        except Exception:  # a tracer: no key, computed afresh
            return super().__call__(x)
        if key not in self.cache:
            self.cache[key] = super().__call__(x)
        return self.cache[key]


class CachesNormaliserGlobally(FIRE):
    """ψ(max(L, i)) cached in a module-level dict under ``(id(self), T)``: stale after any step.
    The traced call of a gradient, merged anew, misses it; the direct call hits it."""

    def __call__(self, x):
        c = self.c[...].reshape(())
        positions = self.positions(x.shape[2], x.dtype)
        key = ("normaliser", id(self), x.shape[2])
        if key not in _CACHE:
            threshold = jnp.abs(self.L_multiplier[...] * self.init_L[...])
            _CACHE[key] = jnp.log(jnp.abs(c * jnp.maximum(positions, threshold)) + 1)[:, None] + self.eps
        rel_distance = self.psi_of_distances(positions[:, None] - positions[None, :])
        h = self.mlp_of((rel_distance / _CACHE[key])[..., None])
        return jnp.transpose(h, (2, 0, 1))[None]


class NamedOtherwiseNoEps(FIRE):
    """Appendix E in NNX whose constructor names its shape otherwise (``n_heads``,
    ``hidden``) and takes no ``eps`` (fixed at the spec's 10⁻⁶)."""

    def __init__(self, n_heads=12, hidden=32, init_c=0.1, init_L=512.0, *, rngs: nnx.Rngs):
        super().__init__(n_heads, hidden, init_c, init_L, 1e-6, rngs=rngs)


class TwoHiddenBiasesNamed(FIRE):
    """Appendix B's approximator with ``nnx.Linear(use_bias=False)`` layers and their biases as
    ``nnx.Param``s named by role: NNX's state sorts them by name (``bias_hidden`` before
    ``bias_in``), so nothing but a ``--map`` says which hidden bias is which."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6, *,
                 rngs: nnx.Rngs):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps, rngs=rngs)
        del self.mlp
        self.lin_in = nnx.Linear(1, mlp_width, use_bias=False, rngs=rngs)
        self.lin_hidden = nnx.Linear(mlp_width, mlp_width, use_bias=False, rngs=rngs)
        self.lin_out = nnx.Linear(mlp_width, num_heads, use_bias=False, rngs=rngs)
        self.bias_in = nnx.Param(jnp.zeros(mlp_width))
        self.bias_hidden = nnx.Param(jnp.zeros(mlp_width))
        self.bias_out = nnx.Param(jnp.zeros(num_heads))

    def mlp_of(self, h):
        h = nnx.relu(self.lin_in(h) + self.bias_in[...])
        h = nnx.relu(self.lin_hidden(h) + self.bias_hidden[...])
        return self.lin_out(h) + self.bias_out[...]


class DetachedInTraining(FIRE):
    """Right in evaluation; called with ``deterministic=False``, as training calls it, its
    threshold is kept out of the gradient (``jax.lax.stop_gradient``): the multiplier's gradient
    is wrong only where the model learns."""

    training = False

    def threshold(self):
        threshold = super().threshold()
        return jax.lax.stop_gradient(threshold) if self.training else threshold

    def __call__(self, x, deterministic: bool = True):
        self.training = not deterministic
        return super().__call__(x)


class DetachedInTrainingWithDropout(DetachedInTraining):
    """``DetachedInTraining`` with an ``nnx.Dropout`` on the bias, on when the call is given
    ``deterministic=False``: training's output then changes from call to call, which had kept the
    detached threshold from being compared (audit 34)."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6, *,
                 rngs: nnx.Rngs):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps, rngs=rngs)
        self.dropout = nnx.Dropout(0.1, rngs=rngs)

    def __call__(self, x, deterministic: bool = True):
        return self.dropout(super().__call__(x, deterministic), deterministic=deterministic)
