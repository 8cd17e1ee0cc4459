"""The paper's Appendix E module in PyTorch, as published, the same with one mistake, and the
GPT-style copy that reads the length from hidden states; the catalogue's MLP mistakes as they are
written in torch (spec/variants.md, "in code"); correct modules whose state is shaped otherwise
than Appendix E's; driven through ``adapters/appendix_e.py`` by ``tests/wild_torch.rs`` when torch is
installed."""

import math

import torch
import torch.nn as nn
from torch.nn.functional import dropout as imported_dropout


class FIRE(nn.Module):
    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(1, mlp_width), nn.ReLU(), nn.Linear(mlp_width, num_heads))
        self.c = nn.Parameter(torch.tensor(init_c))
        self.init_L = nn.Parameter(torch.tensor(init_L), requires_grad=False)
        self.L_multiplier = nn.Parameter(torch.tensor(1.0))
        self.eps = eps

    def numerator(self, rel_distance):
        return torch.log(torch.abs(self.c * rel_distance) + 1)

    def forward(self, x: torch.Tensor):
        seq_length = x.size(2)
        positions = torch.arange(seq_length, dtype=x.dtype, device=x.device)
        rel_distance = positions[:, None] - positions[None, :]
        threshold = torch.abs(self.L_multiplier * self.init_L)
        pos_normalizer = torch.max(positions, threshold)
        pos_normalizer = pos_normalizer[:, None]
        rel_distance = self.numerator(rel_distance)
        pos_normalizer = torch.log(torch.abs(self.c * pos_normalizer) + 1) + self.eps
        normalized_distance = rel_distance / pos_normalizer
        fire_bias = self.mlp(normalized_distance.unsqueeze(-1))
        fire_bias = fire_bias.unsqueeze(0).permute(0, 3, 1, 2)
        return fire_bias


class EpsTwice(FIRE):
    def numerator(self, rel_distance):
        return torch.log(torch.abs(self.c * rel_distance) + 1) + self.eps


class MultiplierStartsAtHalf(FIRE):
    """The multiplier initialised to 0.5: the default threshold is 256, not [fire.defaults]' 512."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.L_multiplier = nn.Parameter(torch.tensor(0.5))


class IgnoresInitL(FIRE):
    """Takes ``init_L`` and starts at 512 whatever it is given: the glue loads each case's
    L_init over it, so only the module as built shows it (``FIRE(init_L=2048)`` would keep 512,
    L_init being frozen)."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, 512.0, eps)


class HalvesInitL(FIRE):
    """Stores ``init_L // 2`` (a public port's choice, audit 37): a model built with
    ``init_L=512`` starts its threshold at 256. A scale, not a reparametrisation: said so, with
    the factor."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, init_L // 2, eps)


class IgnoresInitC(FIRE):
    """Takes ``init_c`` and starts c at 0.1 whatever it is given."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, 0.1, init_L, eps)


class SoftplusC(FIRE):
    """Correct FIRE keeping c positive as softplus of a raw parameter, started at
    softplus⁻¹(init_c): a reparametrisation the glue cannot load a case's c into (refused, and
    said to be a transform of ``init_c``, not an ignored argument)."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)
        self.c = nn.Parameter(torch.tensor(math.log(math.expm1(abs(init_c)))))

    def forward(self, x: torch.Tensor):
        positions = torch.arange(x.size(2), dtype=x.dtype, device=x.device)
        c = torch.nn.functional.softplus(self.c)
        psi = lambda v: torch.log(torch.abs(c * v) + 1)  # noqa: E731
        normalizer = torch.max(positions, torch.abs(self.L_multiplier * self.init_L))[:, None]
        normalized = psi(positions[:, None] - positions[None, :]) / (psi(normalizer) + self.eps)
        return self.mlp(normalized.unsqueeze(-1)).unsqueeze(0).permute(0, 3, 1, 2)


class KeepsAbsC(FIRE):
    """Correct: keeps |init_c| (only |c| enters FIRE), and takes the sign of a case's c loaded
    over it."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, abs(init_c), init_L, eps)


class OtherDefaults(FIRE):
    """Constructor defaults not the spec's: c = 1, L_init = 2048, ε = 1e-3."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=1.0, init_L=2048.0, eps=1e-3):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)


class RequiredArguments(FIRE):
    """Correct, with no defaults of its own: the caller passes c, L_init and ε."""

    def __init__(self, num_heads, mlp_width, init_c, init_L, eps):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)


class HiddenStates(FIRE):
    """Correct; the length read from ``x.size(1)``, ``x`` being a block's hidden states
    ``[batch, seq, dim]``, as the GPT-style copies of Appendix E take it."""

    def forward(self, x: torch.Tensor):
        return super().forward(x.new_zeros(1, 1, x.size(1)))


class TwoHidden(FIRE):
    """Appendix B's approximator: two hidden ReLU layers of ``mlp_width`` (``mlp.0``, ``mlp.2``,
    ``mlp.4``), otherwise the module above."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)
        self.mlp = nn.Sequential(nn.Linear(1, mlp_width), nn.ReLU(), nn.Linear(mlp_width, mlp_width),
                                 nn.ReLU(), nn.Linear(mlp_width, num_heads))


class HiddenBiasFalse(FIRE):
    """``hidden-bias-missing``: ``nn.Linear(1, W, bias=False)``."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)
        self.mlp = nn.Sequential(nn.Linear(1, mlp_width, bias=False), nn.ReLU(), nn.Linear(mlp_width, num_heads))


class OutputBiasFalse(FIRE):
    """``output-bias-missing``: ``nn.Linear(W, H, bias=False)``."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)
        self.mlp = nn.Sequential(nn.Linear(1, mlp_width), nn.ReLU(), nn.Linear(mlp_width, num_heads, bias=False))


class NoHiddenActivation(FIRE):
    """``no-hidden-activation``: ``nn.Sequential(nn.Linear(1, W), nn.Linear(W, H))``, whose layers
    are ``mlp.0`` and ``mlp.1``."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)
        self.mlp = nn.Sequential(nn.Linear(1, mlp_width), nn.Linear(mlp_width, num_heads))


class ScalarsShape1(FIRE):
    """Correct; ``c``, ``init_L`` and ``L_multiplier`` kept as ``[1]`` tensors, a common style."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)
        self.c = nn.Parameter(torch.tensor([init_c]))
        self.init_L = nn.Parameter(torch.tensor([init_L]), requires_grad=False)
        self.L_multiplier = nn.Parameter(torch.ones(1))


class ScalarsBroadcastReady(FIRE):
    """Correct; ``c`` kept as ``[1, 1, 1]`` and ``L_multiplier`` as ``[1, 1]``, ready to
    broadcast against ``[H, T, T]`` and ``[T, 1]`` (had been refused as an adapter failure)."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)
        self.c = nn.Parameter(torch.full((1, 1, 1), init_c))
        self.L_multiplier = nn.Parameter(torch.ones(1, 1))

    def forward(self, x: torch.Tensor):
        positions = torch.arange(x.size(2), dtype=x.dtype, device=x.device)
        rel_distance = (positions[:, None] - positions[None, :])[None]  # [1, T, T]
        threshold = torch.abs(self.L_multiplier * self.init_L)  # [1, 1]
        normalizer = torch.maximum(positions[:, None], threshold)[None]  # [1, T, 1]
        psi = lambda v: torch.log(torch.abs(self.c * v) + 1)  # noqa: E731
        normalized = psi(rel_distance) / (psi(normalizer) + self.eps)  # [1, T, T]
        return self.mlp(normalized.unsqueeze(-1)).permute(0, 3, 1, 2)  # [1, H, T, T]


class PositionsBuffer(FIRE):
    """Correct; the positions precomputed in a persistent buffer, so in the state dict."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6, max_len=8192):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)
        self.register_buffer("positions", torch.arange(max_len, dtype=torch.float32))

    def forward(self, x: torch.Tensor):
        pos = self.positions[:x.size(2)].to(x.dtype)
        rel = self.numerator(pos[:, None] - pos[None, :])
        norm = torch.log(torch.abs(self.c * torch.max(pos, torch.abs(self.L_multiplier * self.init_L))) + 1) + self.eps
        return self.mlp((rel / norm[:, None]).unsqueeze(-1)).unsqueeze(0).permute(0, 3, 1, 2)


class ExtraParameter(FIRE):
    """Appendix E with a learnable output scale: a parameter no case value reaches, which the
    glue must refuse by name rather than leave at its initial value."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, x: torch.Tensor):
        return self.scale * super().forward(x)


class TrainableInitL(FIRE):
    """The bias right, but ``init_L`` left trainable (``requires_grad`` True): it takes a
    gradient that [grad.layout] freezes, and every other gradient is still right."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)
        self.init_L = nn.Parameter(torch.tensor(init_L))


class OutputLayerFirst(FIRE):
    """Correct; the MLP's two layers are plain attributes, the output layer built before the
    input layer, so neither its names nor its registration order say which comes first: only
    their shapes do."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)
        del self.mlp
        self.proj_out = nn.Linear(mlp_width, num_heads)
        self.proj_in = nn.Linear(1, mlp_width)

    def mlp(self, x):
        return self.proj_out(torch.relu(self.proj_in(x)))


class LazyLayers(FIRE):
    """Correct; the MLP of ``nn.LazyLinear`` layers, whose parameters exist only after the
    first call (the glue had failed every case cloning an uninitialised parameter)."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)
        self.mlp = nn.Sequential(nn.LazyLinear(mlp_width), nn.ReLU(), nn.LazyLinear(num_heads))


class SignedDistance(FIRE):
    """ψ of the signed distance i − j: right on the causal triangle, NaN (or negative) above it,
    so it declares `negated`; the NaN reaches every gradient through 0·NaN in the MLP's
    backward even where the cotangent is 0, as it would in training."""

    def numerator(self, rel_distance):
        return torch.log(torch.abs(self.c) * rel_distance + 1)


class MixedPrecision(FIRE):
    """Computes in the dtype it is cast to and returns float32, as an autocast-style module
    hands its bias to an f32 softmax: asked for bf16, graded by the bf16 profile."""

    def forward(self, x: torch.Tensor):
        return super().forward(x).float()


class NumpyOut(FIRE):
    """Right values handed back as a NumPy array (``.numpy()`` at the end of forward): its bias
    is graded, and no parameter gets a gradient (the gradient cases had been skipped, the run
    passing)."""

    def forward(self, x: torch.Tensor):
        return super().forward(x).detach().numpy()


class MultiplierBuffer(FIRE):
    """The multiplier kept as a buffer ``L_mult``: refused naming it, not graded as
    ``multiplier-ignored``."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)
        del self.L_multiplier
        self.register_buffer("L_mult", torch.tensor(1.0))

    @property
    def L_multiplier(self):
        return self.L_mult


class RequiresL(FIRE):
    """Correct, with L_init required and the spec's defaults for c and ε."""

    def __init__(self, num_heads, mlp_width, init_L, init_c=0.1, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)


class RequiresLOtherDefaults(FIRE):
    """L_init required; c and ε default to 1 and 1e-3, not the spec's."""

    def __init__(self, num_heads, mlp_width, init_L, init_c=1.0, eps=1e-3):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)


class CachesFirstBias(FIRE):
    """Keeps the bias of its first call for each length and returns it ever after: the
    parameters loaded (or an optimiser's step) after that call never reach the output."""

    def forward(self, x):
        cache = self.__dict__.setdefault("_cache", {})
        T = x.size(2)
        if T not in cache:
            cache[T] = super().forward(x)
        return cache[T]


class CachesInEvalOnly(FIRE):
    """An inference cache, filled only in eval mode without gradients and never cleared: right
    in training, stale in every evaluation after the first training step since."""

    def uncached(self):
        """Whether this call computes afresh rather than through the cache."""
        return self.training or torch.is_grad_enabled()

    def forward(self, x):
        if self.uncached():
            return super().forward(x)
        cache = self.__dict__.setdefault("_cache", {})
        T = x.size(2)
        if T not in cache:
            cache[T] = super().forward(x)
        return cache[T]


class CachesInEvalClearedOnTrain(CachesInEvalOnly):
    """Correct: the inference cache above, cleared whenever the module is put in training mode,
    where its parameters start to change."""

    def train(self, mode=True):
        self.__dict__.setdefault("_cache", {}).clear()
        return super().train(mode)


class InferenceCacheKeyedOnC(FIRE):
    """An inference cache (no gradients) keyed on the length and c: recomputed when c changes,
    stale when only f_θ or the multiplier does (a frozen c, fine-tuning the MLP alone)."""

    def forward(self, x):
        if torch.is_grad_enabled():
            return super().forward(x)
        cache = self.__dict__.setdefault("_cache", {})
        key = (x.size(2), float(self.c))
        if key not in cache:
            cache[key] = super().forward(x)
        return cache[key]


_NORMALISERS = {}


class NormaliserCachedGlobally(FIRE):
    """The normaliser ψ(max(i, L)) + ε cached in a dict at module level under the length: the
    first call's c and multiplier for every later call (a twin built anew shares the dict, so
    only the file imported afresh shows it; it had failed as "no catalogued variant")."""

    def forward(self, x):
        seq_length = x.size(2)
        positions = torch.arange(seq_length, dtype=x.dtype)
        if seq_length not in _NORMALISERS:
            threshold = torch.abs(self.L_multiplier * self.init_L)
            pos_normalizer = torch.log(torch.abs(self.c * torch.max(positions, threshold)) + 1)
            _NORMALISERS[seq_length] = (pos_normalizer + self.eps).detach()
        rel_distance = positions[:, None] - positions[None, :]
        normalized = self.numerator(rel_distance) / _NORMALISERS[seq_length][:, None]
        return self.mlp(normalized.unsqueeze(-1)).unsqueeze(0).permute(0, 3, 1, 2)


_POSITIONS = {}


class PositionsCachedGlobally(FIRE):
    """Correct: the positions cached at module level under the length, which is all they
    depend on."""

    def forward(self, x):
        seq_length = x.size(2)
        if seq_length not in _POSITIONS:
            _POSITIONS[seq_length] = torch.arange(seq_length, dtype=x.dtype)
        positions = _POSITIONS[seq_length]
        rel_distance = self.numerator(positions[:, None] - positions[None, :])
        threshold = torch.abs(self.L_multiplier * self.init_L)
        pos_normalizer = torch.log(torch.abs(self.c * torch.max(positions, threshold)) + 1) + self.eps
        normalized = rel_distance / pos_normalizer[:, None]
        return self.mlp(normalized.unsqueeze(-1)).unsqueeze(0).permute(0, 3, 1, 2)


class OffsetBuffer(FIRE):
    """A decoding offset kept in a buffer and advanced by the length on every forward: the
    second call's positions start past the first's (it had been blamed on x, the probe being
    the next call)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register_buffer("offset", torch.zeros(()))

    def forward(self, x):
        seq_length = x.size(2)
        positions = torch.arange(seq_length, dtype=x.dtype) + self.offset
        self.offset += seq_length
        rel_distance = self.numerator(positions[:, None] - positions[None, :])
        threshold = torch.abs(self.L_multiplier * self.init_L)
        pos_normalizer = torch.log(torch.abs(self.c * torch.max(positions, threshold)) + 1) + self.eps
        normalized = rel_distance / pos_normalizer[:, None]
        return self.mlp(normalized.unsqueeze(-1)).unsqueeze(0).permute(0, 3, 1, 2)


def make_fire_other_defaults(num_heads=12, mlp_width=32, init_c=0.1, init_L=256.0, eps=1e-6):
    """A factory function given for CLASS, whose default threshold is 256, not 512: built on
    its own defaults on the [fire.defaults] cases as a class is."""
    return FIRE(num_heads, mlp_width, init_c, init_L, eps)


class HalfMLP(FIRE):
    """The MLP made ``.half()`` in ``__init__`` ("it is tiny"), its input cast to the MLP's dtype
    and its output back: as built, f_θ computes in float16 and the bias is off by ~1e-3 of its
    scale, which a glue casting the whole module to the dtype asked would hide (audit 20)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.mlp.half()

    def forward(self, x: torch.Tensor):
        seq_length = x.size(2)
        positions = torch.arange(seq_length, dtype=x.dtype, device=x.device)
        threshold = torch.abs(self.L_multiplier * self.init_L)
        normalizer = torch.log(torch.abs(self.c * torch.max(positions, threshold)) + 1) + self.eps
        normalized = self.numerator(positions[:, None] - positions[None, :]) / normalizer[:, None]
        out = self.mlp(normalized.unsqueeze(-1).to(self.mlp[0].weight.dtype)).to(x.dtype)
        return out.unsqueeze(0).permute(0, 3, 1, 2)


class ScoresPlusBias(FIRE):
    """Correct: forward(scores) adds the bias to the attention scores [B, H, T, T]."""

    def forward(self, scores: torch.Tensor):
        return scores + super().forward(scores[..., :1])


class XPlusBias(FIRE):
    """Correct: forward(x) takes the attention scores [B, H, T, T] under the name x and returns
    them plus the bias (audit 32: the training step's call, made before the graded one, kept the
    first layout of x, [B, H, T, 1], where x of zeros passes, and every case failed)."""

    def forward(self, x: torch.Tensor):
        return x + super().forward(x[..., :1])


class _Softplus(nn.Module):
    def forward(self, raw):
        return torch.nn.functional.softplus(raw)

    def right_inverse(self, c):
        return c + torch.log(-torch.expm1(-c))


class ParametrizedSoftplusC(FIRE):
    """Correct: c kept positive as softplus(raw) through ``torch.nn.utils.parametrize`` (with a
    right_inverse), so the state dict holds ``parametrizations.c.original``; only |c| enters
    FIRE, so cases with a negative c are ones it cannot represent (audit 20)."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, abs(init_c), init_L, eps)
        torch.nn.utils.parametrize.register_parametrization(self, "c", _Softplus())


class WeightNormMLP(FIRE):
    """Correct: the MLP's layers under ``weight_norm`` (state ``parametrizations.weight.original0``
    and ``original1``)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for n in (0, 2):
            torch.nn.utils.parametrizations.weight_norm(self.mlp[n])


class HeadMixing(FIRE):
    """An extra H × H layer after the output, mixing the heads (``mlp.3``): not FIRE's f_θ
    (audit 19)."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)
        self.mlp.append(nn.Linear(num_heads, num_heads))


class Detached(FIRE):
    """Returns its bias detached: right values, and no parameter ever gets a gradient."""

    def forward(self, x: torch.Tensor):
        return super().forward(x).detach()


class Wrapped(nn.Module):
    """Correct: Appendix E held as an attribute of a wrapper (``torch.compile``'s ``_orig_mod``
    does the same), so every name sits under ``fire._orig_mod.``."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__()
        self.fire = nn.Module()
        self.fire._orig_mod = FIRE(num_heads, mlp_width, init_c, init_L, eps)

    def forward(self, x: torch.Tensor):
        return self.fire._orig_mod(x)


class CBuffer(FIRE):
    """c kept as a buffer: right values, but c never trains (audit 20)."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)
        del self.c
        self.register_buffer("c", torch.tensor(init_c))


class PerLayer(nn.Module):
    """Two FIREs, one per layer, in a ModuleList: which one to grade is the user's to say."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__()
        self.layers = nn.ModuleList([FIRE(num_heads, mlp_width, init_c, init_L, eps) for _ in range(2)])

    def forward(self, x: torch.Tensor):
        return self.layers[0](x)


class CachesInTheClass(FIRE):
    """An inference cache meant per instance but made a class attribute (``_cache = {}`` in the
    class body), keyed on the length: every module built after the first shares it, and gets
    the first one's bias for a length it has seen."""

    _cache = {}

    def forward(self, x):
        if self.training or torch.is_grad_enabled():
            return super().forward(x)
        T = x.size(2)
        if T not in self._cache:
            self._cache[T] = super().forward(x)
        return self._cache[T]


class SharedCacheKeyedOnParameters(FIRE):
    """Correct: a cache shared by every instance, keyed on the length, ε and the parameters'
    values, so an instance with other values computes its own bias (keyed on the parameters
    alone, it would hand one ε's bias to a module with another)."""

    _cache = {}

    def forward(self, x):
        key = (x.size(2), x.dtype, self.eps,
               tuple(tuple(p.detach().reshape(-1).tolist()) for p in self.parameters()))
        if self.training or torch.is_grad_enabled():
            return super().forward(x)
        if key not in self._cache:
            self._cache[key] = super().forward(x)
        return self._cache[key]


class CachesWithoutGradients(FIRE):
    """A cache per instance, used whenever gradients are off (eval or not) and keyed on the
    length: a call under ``no_grad`` before the parameters change fills it with a bias the
    later calls under ``no_grad`` return."""

    def forward(self, x):
        if torch.is_grad_enabled():
            return super().forward(x)
        cache = self.__dict__.setdefault("_cache", {})
        T = x.size(2)
        if T not in cache:
            cache[T] = super().forward(x)
        return cache[T]


class PsiTableFromInitC(FIRE):
    """ψ of every distance up to 4 096 tabulated in ``__init__`` from the constructor's c, as a
    plain tensor (no graph) never rebuilt: right only while c is the constructor's, so a loaded
    checkpoint's c or a trained one never reaches the distances."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)
        self.table = torch.log(abs(init_c) * torch.arange(4096, dtype=torch.float64) + 1)

    def numerator(self, rel_distance):
        return self.table.to(rel_distance.dtype)[rel_distance.abs().long()]


class CacheClearedOnLoad(FIRE):
    """A bias cached under the length in every mode, cleared when a state dict is loaded: a
    checkpoint reaches it, an optimiser's in-place step does not."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._cache = {}

    def _load_from_state_dict(self, *args, **kwargs):
        self._cache.clear()
        return super()._load_from_state_dict(*args, **kwargs)

    def forward(self, x):
        T = x.size(2)
        if T not in self._cache:
            self._cache[T] = super().forward(x)
        return self._cache[T]


class CachesItsNormaliser(FIRE):
    """Appendix E with ψ(max(i, L)) + ε cached under the length, never recomputed: the bias
    follows the MLP and c's distances, not a later c or multiplier in the normaliser."""

    def forward(self, x):
        cache = self.__dict__.setdefault("_norms", {})
        T = x.size(2)
        if T not in cache:
            positions = torch.arange(T, dtype=x.dtype, device=x.device)
            threshold = torch.abs(self.L_multiplier * self.init_L)
            cache[T] = torch.log(torch.abs(self.c * torch.max(positions, threshold)) + 1) + self.eps
        positions = torch.arange(T, dtype=x.dtype, device=x.device)
        rel = self.numerator(positions[:, None] - positions[None, :])
        out = self.mlp((rel / cache[T][:, None]).unsqueeze(-1))
        return out.unsqueeze(0).permute(0, 3, 1, 2)


class CacheKeyedOnVersions(FIRE):
    """Correct: a bias cached under the length and the parameters' versions (which every
    in-place update, an optimiser's included, advances), rebuilt whenever gradients are on."""

    def forward(self, x):
        key = (x.size(2), x.dtype, tuple(p._version for p in self.parameters()))
        cache = self.__dict__.setdefault("_cache", {})
        if torch.is_grad_enabled() or cache.get("key") != key:
            cache["key"], cache["bias"] = key, super().forward(x)
        return cache["bias"]


def compiled_fire(num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
    """Correct: ``model = torch.compile(model)`` as the factory returns it (eager backend: the
    wrapper, not the compiler, is what the glue meets)."""
    return torch.compile(FIRE(num_heads, mlp_width, init_c, init_L, eps), backend="eager")


class CacheKeptWithItsGraph(FIRE):
    """A bias cached under the length and the parameters' versions in every mode, graph and
    all: it follows every parameter update, but a second backward before the next update
    (gradient accumulation over two batches) runs through the graph the first one freed."""

    def forward(self, x):
        key = (x.size(2), torch.is_grad_enabled(), tuple(p._version for p in self.parameters()))
        cache = self.__dict__.setdefault("_cache", {})
        if key not in cache:
            cache.clear()
            cache[key] = super().forward(x)
        return cache[key]


_REGISTRY = {}


class ParametersInARegistry(nn.Module):
    """Correct: the parameters of every module of one shape live in one module of a module-level
    registry (FIRE-S's sharing across layers, done through a global), reset by each constructor."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__()
        shared = _REGISTRY.setdefault((num_heads, mlp_width), FIRE(num_heads, mlp_width, init_c, init_L, eps))
        with torch.no_grad():
            shared.c.fill_(init_c)
            shared.init_L.fill_(init_L)
            shared.L_multiplier.fill_(1.0)
        shared.eps = eps
        self.fire = shared

    def forward(self, x):
        return self.fire(x)


class ArgumentsNamedOtherwise(FIRE):
    """Appendix E with its constructor's arguments named otherwise: reached with ``--map-arg``."""

    def __init__(self, n_heads=12, hidden=32, c0=0.1, L0=512.0, eps=1e-6):
        super().__init__(n_heads, hidden, c0, L0, eps)


class NoEpsArgument(FIRE):
    """Appendix E with ε fixed at the spec's 10⁻⁶ (no ``eps`` argument)."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0):
        super().__init__(num_heads, mlp_width, init_c, init_L, 1e-6)


class BiasesApart(FIRE):
    """``nn.Linear(bias=False)`` layers with their biases as parameters of their own, added by
    the module: a correct FIRE."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)
        self.mlp = nn.Sequential(nn.Linear(1, mlp_width, bias=False), nn.ReLU(),
                                 nn.Linear(mlp_width, num_heads, bias=False))
        self.b0 = nn.Parameter(torch.zeros(mlp_width))
        self.b1 = nn.Parameter(torch.zeros(num_heads))
        self.mlp[0].register_forward_hook(lambda mod, args, out: out + self.hidden_bias())
        self.mlp[2].register_forward_hook(lambda mod, args, out: out + self.b1)

    def hidden_bias(self):
        return self.b0


class BiasesApartAfterActivation(BiasesApart):
    """``BiasesApart`` adding the hidden bias after the activation."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.mlp[1].register_forward_hook(lambda mod, args, out: out + self.b0)

    def hidden_bias(self):
        return 0.0


class HeadBiasBroadcast(FIRE):
    """The output ``nn.Linear(bias=False)``, the heads' bias an ``[H, 1, 1]`` parameter added to
    the head-first bias: a correct FIRE."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)
        self.mlp[2] = nn.Linear(mlp_width, num_heads, bias=False)
        self.head_bias = nn.Parameter(torch.zeros(num_heads, 1, 1))

    def forward(self, x):
        return super().forward(x) + self.head_bias


class TwoHiddenBiasesNamed(nn.Module):
    """Appendix B's approximator whose three layers are ``nn.Linear(bias=False)`` and whose
    biases are named by role, registered first layer first: their order says which hidden one
    is which."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__()
        self.base = FIRE(num_heads, mlp_width, init_c, init_L, eps)
        self.base.mlp = nn.Sequential(nn.Linear(1, mlp_width, bias=False), nn.ReLU(),
                                      nn.Linear(mlp_width, mlp_width, bias=False), nn.ReLU(),
                                      nn.Linear(mlp_width, num_heads, bias=False))
        self.bias_in = nn.Parameter(torch.zeros(mlp_width))
        self.bias_hidden = nn.Parameter(torch.zeros(mlp_width))
        self.bias_out = nn.Parameter(torch.zeros(num_heads))
        mlp = self.base.mlp
        mlp[0].register_forward_hook(lambda mod, args, out: out + self.bias_in)
        mlp[2].register_forward_hook(lambda mod, args, out: out + self.bias_hidden)
        mlp[4].register_forward_hook(lambda mod, args, out: out + self.bias_out)

    def forward(self, x):
        return self.base(x)


class FrozenHeadBias(HeadBiasBroadcast):
    """``HeadBiasBroadcast`` whose heads' bias never trains (``requires_grad=False``)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.head_bias.requires_grad_(False)


class OneOutputForEveryHead(FIRE):
    """f_θ with one output shared by the heads, told apart by a learned log-threshold each (as a
    public "FIRE" does): every layer as asked but the last, which FIRE's f_θ: ℝ → ℝ^H has one
    output per head."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)
        self.num_heads = num_heads
        self.mlp = nn.Sequential(nn.Linear(1, mlp_width), nn.ReLU(), nn.Linear(mlp_width, 1))
        self.log_threshold = nn.Parameter(torch.full((num_heads,), math.log(init_L)))

    def forward(self, x):
        positions = torch.arange(x.size(2), dtype=x.dtype, device=x.device)
        rel = (positions[:, None] - positions[None, :]).abs()
        threshold = self.log_threshold.exp()[:, None, None]
        z = torch.log1p(self.c.abs() * rel) / torch.log1p(self.c.abs() * torch.maximum(positions[:, None], threshold))
        return self.mlp(z.unsqueeze(-1)).squeeze(-1).unsqueeze(0)


class InitLKeptAsAttribute(FIRE):
    """Takes ``init_L`` and keeps 512 as a float attribute whatever it is given: no parameter or
    buffer holds L_init, so only a module built with another ``init_L`` shows it ignored."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)
        del self.init_L
        self.init_L = 512.0


class InitLFollowedAsAttribute(FIRE):
    """Correct: ``init_L`` kept as the float attribute it is given."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)
        del self.init_L
        self.init_L = float(init_L)


class InitLFollowedMasked(InitLFollowedAsAttribute):
    """``InitLFollowedAsAttribute`` masking the keys after the query with ``finfo.min`` (declared
    ``masked``): correct (audit 31: the mask had made every module built anew the same)."""

    def forward(self, x: torch.Tensor):
        b = super().forward(x)
        T = b.size(-1)
        future = torch.ones(T, T, dtype=torch.bool, device=b.device).triu(1)
        return b.masked_fill(future, torch.finfo(b.dtype).min)


class InitLKeptMasked(InitLFollowedMasked):
    """``InitLFollowedMasked`` keeping 512 whatever ``init_L`` it is given."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, 512.0, eps)


class HandWritten(FIRE):
    """Correct, hand-written: the MLP as bare parameters, ``W1`` ``[1, W]`` and ``W2`` ``[W, H]``
    for ``z @ W`` with ``b1``, ``b2``: found by their names, read ``[in, out]`` as only that
    composes, gradients transposed back. ``vector_first``: the first weight a vector ``w_in``
    (``z[..., None] * w_in + b_in``) and the output ``F.linear``'s ``[H, W]`` ``w_out``.
    ``names_say``: False names them ``p1``…``p4``, refused naming the --map."""

    vector_first = False
    names_say = True

    def __init__(self, num_heads=12, mlp_width=32, **kwargs):
        super().__init__(num_heads, mlp_width, **kwargs)
        del self.mlp
        w1 = torch.randn(mlp_width) if self.vector_first else torch.randn(1, mlp_width)
        w2 = torch.randn(num_heads, mlp_width) if self.vector_first else torch.randn(mlp_width, num_heads)
        values = [w1, torch.zeros(mlp_width), w2 / math.sqrt(mlp_width), torch.zeros(num_heads)]
        for name, v in zip(self.names(), values):
            setattr(self, name, nn.Parameter(v))

    def names(self):
        if not self.names_say:
            return ["p1", "p2", "p3", "p4"]
        return ["w_in", "b_in", "w_out", "b_out"] if self.vector_first else ["W1", "b1", "W2", "b2"]

    def mlp(self, z):
        w1, b1, w2, b2 = (getattr(self, n) for n in self.names())
        if self.vector_first:
            return nn.functional.linear(torch.relu(z * w1 + b1), w2, b2)
        return torch.relu(z @ w1 + b1) @ w2 + b2


class HandWrittenVectorFirst(HandWritten):
    vector_first = True


class HandWrittenUnnamed(HandWritten):
    names_say = False


class ClampedHidden(FIRE):
    """Mistaken: f_θ's hidden pre-activations clamped to ±50 "for stability": where they all
    saturate (the suite's ±200 case) the bias no longer moves with c or m, so the glue's step,
    which scales them, returns the graded bias exactly. Not a cache (audit 32: it was named
    StaleBias)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        first, act, out = self.mlp
        self.mlp = nn.Sequential(first, ClampFifty(), act, out)


class ClampFifty(nn.Module):
    def forward(self, h):
        return h.clamp(-50.0, 50.0)


class FloorDivided(FIRE):
    """Mistaken: f_θ's input ψ(i − j) / ψ(max(L, i)) taken with floor division (0 or 1 below
    the threshold), deaf to small changes of c and m: not a cache either (audit 32)."""

    def forward(self, x: torch.Tensor):
        seq_length = x.size(2)
        positions = torch.arange(seq_length, dtype=x.dtype, device=x.device)
        rel = self.numerator(positions[:, None] - positions[None, :])
        threshold = torch.abs(self.L_multiplier * self.init_L)
        normalizer = torch.log(torch.abs(self.c * torch.max(positions, threshold)) + 1) + self.eps
        z = torch.div(rel, normalizer[:, None], rounding_mode="floor")
        return self.mlp(z.unsqueeze(-1)).unsqueeze(0).permute(0, 3, 1, 2)


class ScalarsNamedOtherwise(nn.Module):
    """Correct: the scalars under names of their own that say which they are (``fire_c``,
    ``L_mult``, a buffer ``L_init``) and the MLP an ``nn.ModuleList``: read without --map."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(1, mlp_width), nn.Linear(mlp_width, num_heads)])
        self.fire_c = nn.Parameter(torch.tensor(init_c))
        self.register_buffer("L_init", torch.tensor(init_L))
        self.L_mult = nn.Parameter(torch.tensor(1.0))
        self.eps = eps

    def forward(self, x: torch.Tensor):
        positions = torch.arange(x.size(2), dtype=x.dtype, device=x.device)
        threshold = torch.abs(self.L_mult * self.L_init)
        normalizer = torch.log(torch.abs(self.fire_c * torch.max(positions, threshold)) + 1) + self.eps
        rel = torch.log(torch.abs(self.fire_c * (positions[:, None] - positions[None, :])) + 1)
        z = (rel / normalizer[:, None]).unsqueeze(-1)
        out = self.layers[1](torch.relu(self.layers[0](z)))
        return out.unsqueeze(0).permute(0, 3, 1, 2)


class DetachedInTraining(FIRE):
    """Mistaken on the path training takes: the normaliser ``.detach()``-ed under
    ``if self.training``, so c and the multiplier learn through the numerator alone. Eval mode,
    where the glue grades, is right (audit 32: it passed)."""

    def forward(self, x: torch.Tensor):
        positions = torch.arange(x.size(2), dtype=x.dtype, device=x.device)
        threshold = torch.abs(self.L_multiplier * self.init_L)
        normalizer = torch.log(torch.abs(self.c * torch.max(positions, threshold)) + 1) + self.eps
        if self.training:
            normalizer = normalizer.detach()
        z = self.numerator(positions[:, None] - positions[None, :]) / normalizer[:, None]
        return self.mlp(z.unsqueeze(-1)).unsqueeze(0).permute(0, 3, 1, 2)


class DropoutInTraining(FIRE):
    """Correct: dropout on f_θ's hidden layer in train mode, eval mode FIRE's. The glue's
    train-mode call turns the dropout off (a dropout is the model's choice, not a FIRE mistake),
    and the rest is compared with eval mode's."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        first, act, out = self.mlp
        self.mlp = nn.Sequential(first, act, nn.Dropout(0.5), out)


class NoisyInTraining(FIRE):
    """Correct, a noise on the bias in train mode (``torch.randn_like``): its train-mode output
    changes from call to call; under a fixed seed the gradients it sends c and the multiplier
    are its own call's derivative."""

    def forward(self, x: torch.Tensor):
        bias = super().forward(x)
        return bias + 0.1 * torch.randn_like(bias) if self.training else bias


class NoisyDetachedInTraining(DetachedInTraining):
    """``DetachedInTraining`` under the same noise: it had passed, not compared."""

    def forward(self, x: torch.Tensor):
        bias = super().forward(x)
        return bias + 0.1 * torch.randn_like(bias) if self.training else bias


class GeneratorNoiseInTraining(FIRE):
    """Correct, its train-mode noise from a ``torch.Generator`` of its own, which no seed of
    torch's fixes: not compared, and the run says so."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.generator = torch.Generator().manual_seed(0)

    def forward(self, x: torch.Tensor):
        bias = super().forward(x)
        if not self.training:
            return bias
        return bias + 0.1 * torch.randn(bias.shape, generator=self.generator, dtype=bias.dtype)


class LongWithoutGradient(FIRE):
    """Memory saved on long sequences the wrong way: past 1 024 positions the bias is computed
    under ``torch.no_grad()``. Every gradient case is a small square, and passed."""

    def forward(self, x: torch.Tensor):
        if x.size(2) > 1024:
            with torch.no_grad():
                return super().forward(x)
        return super().forward(x)


class LongDetachedNormaliser(FIRE):
    """Past 1 024 positions the normaliser is ``.detach()``-ed (its gradient "not needed" at
    length): c and the multiplier learn through the numerator alone there."""

    def forward(self, x: torch.Tensor):
        positions = torch.arange(x.size(2), dtype=x.dtype, device=x.device)
        threshold = torch.abs(self.L_multiplier * self.init_L)
        normalizer = torch.log(torch.abs(self.c * torch.max(positions, threshold)) + 1) + self.eps
        if x.size(2) > 1024:
            normalizer = normalizer.detach()
        z = self.numerator(positions[:, None] - positions[None, :]) / normalizer[:, None]
        return self.mlp(z.unsqueeze(-1)).unsqueeze(0).permute(0, 3, 1, 2)


class LongQuantisedInput(FIRE):
    """Time saved on long sequences: past 1 024 positions f_θ's input is rounded to 1/256 (a
    table lookup's grid), 10⁻³ off. Every gradient case is a small square, and passed."""

    def forward(self, x: torch.Tensor):
        positions = torch.arange(x.size(2), dtype=x.dtype, device=x.device)
        threshold = torch.abs(self.L_multiplier * self.init_L)
        normalizer = torch.log(torch.abs(self.c * torch.max(positions, threshold)) + 1) + self.eps
        z = self.numerator(positions[:, None] - positions[None, :]) / normalizer[:, None]
        if x.size(2) > 1024:
            z = z + ((z * 256).round() / 256 - z).detach()
        return self.mlp(z.unsqueeze(-1)).unsqueeze(0).permute(0, 3, 1, 2)


class LongDetachedInTraining(FIRE):
    """Memory saved in training on long sequences the wrong way (audit 37): in ``.train()``
    mode past 1 024 positions c and the multiplier are detached, so they learn nothing at the
    context the model trains at. Evaluation mode, and training on the small squares, are
    FIRE's."""

    def forward(self, x: torch.Tensor):
        if not (self.training and x.size(2) > 1024):
            return super().forward(x)
        positions = torch.arange(x.size(2), dtype=x.dtype, device=x.device)
        c, threshold = self.c.detach(), torch.abs(self.L_multiplier * self.init_L).detach()
        normalizer = torch.log(torch.abs(c * torch.max(positions, threshold)) + 1) + self.eps
        z = torch.log(torch.abs(c * torch.abs(positions[:, None] - positions[None, :])) + 1) / normalizer[:, None]
        return self.mlp(z.unsqueeze(-1)).unsqueeze(0).permute(0, 3, 1, 2)


class LongCachedInEvaluation(FIRE):
    """Time saved in evaluation on long sequences (audit 37): past 1 024 positions the bias is
    cached by length in eval mode, and a training step leaves it stale. The glue's step before
    every small case never reaches that length."""

    def forward(self, x: torch.Tensor):
        T = x.size(2)
        if self.training or T <= 1024:
            return super().forward(x)
        cache = self.__dict__.setdefault("long_cache", {})
        if T not in cache:
            cache[T] = super().forward(x).detach()
        return cache[T]


class CachedInInference(CachesInEvalOnly):
    """The cache above under ``torch.inference_mode()`` alone (audit 37): generation calls it
    there, and a training step leaves it stale. ``torch.no_grad()``, which the graded calls
    use, never takes that path."""

    def uncached(self):
        return not torch.is_inference_mode_enabled()


class LongInChunksInTraining(FIRE):
    """Correct: in ``.train()`` mode past 1 024 positions f_θ runs on 256 rows at a time under
    activation checkpointing, the graph kept; the long check made in training mode passes it."""

    def forward(self, x: torch.Tensor):
        T = x.size(2)
        if not (self.training and T > 1024):
            return super().forward(x)
        from torch.utils.checkpoint import checkpoint

        positions = torch.arange(T, dtype=x.dtype, device=x.device)
        threshold = torch.abs(self.L_multiplier * self.init_L)
        normalizer = torch.log(torch.abs(self.c * torch.max(positions, threshold)) + 1) + self.eps
        z = self.numerator(positions[:, None] - positions[None, :]) / normalizer[:, None]
        rows = [checkpoint(self.mlp, z[r:r + 256].unsqueeze(-1), use_reentrant=False)
                for r in range(0, T, 256)]
        return torch.cat(rows).unsqueeze(0).permute(0, 3, 1, 2)


class LongInChunks(FIRE):
    """Correct, memory saved on long sequences the right way: past 1 024 positions f_θ runs on
    256 rows at a time, the graph kept."""

    def forward(self, x: torch.Tensor):
        T = x.size(2)
        if T <= 1024:
            return super().forward(x)
        positions = torch.arange(T, dtype=x.dtype, device=x.device)
        threshold = torch.abs(self.L_multiplier * self.init_L)
        normalizer = torch.log(torch.abs(self.c * torch.max(positions, threshold)) + 1) + self.eps
        z = self.numerator(positions[:, None] - positions[None, :]) / normalizer[:, None]
        rows = [self.mlp(z[r:r + 256].unsqueeze(-1)) for r in range(0, T, 256)]
        return torch.cat(rows).unsqueeze(0).permute(0, 3, 1, 2)


class ModelConfig:
    """A model's config as Hugging Face's ``PretrainedConfig`` holds one: plain attributes, the
    model's own beside FIRE's."""

    def __init__(self, hidden_size=768, num_attention_heads=12, fire_mlp_width=32, fire_init_c=0.1,
                 fire_init_L=512.0, fire_eps=1e-6, rms_norm_eps=1e-5):
        self.hidden_size, self.num_attention_heads = hidden_size, num_attention_heads
        self.fire_mlp_width, self.fire_init_c, self.fire_init_L = fire_mlp_width, fire_init_c, fire_init_L
        self.fire_eps, self.rms_norm_eps = fire_eps, rms_norm_eps


class FromConfig(FIRE):
    """Correct, built from a model's config (``__init__(self, config: ModelConfig)``)."""

    def __init__(self, config: ModelConfig, layer_idx=None):
        super().__init__(config.num_attention_heads, config.fire_mlp_width, config.fire_init_c,
                         config.fire_init_L, config.fire_eps)


class FromConfigIgnoresC(FIRE):
    """Built from a model's config, whose ``fire_init_c`` it reads for nothing: c starts at 0.1
    whatever the config says."""

    def __init__(self, config):
        super().__init__(config.num_attention_heads, config.fire_mlp_width, 0.1,
                         config.fire_init_L, config.fire_eps)
        self.unused = config.fire_init_c


class FromConfigFixedWidth(FIRE):
    """Built from a model's config, whose ``fire_mlp_width`` it reads for nothing: f_θ is 32 wide
    whatever the config says."""

    def __init__(self, config):
        super().__init__(config.num_attention_heads, 32 + 0 * config.fire_mlp_width,
                         config.fire_init_c, config.fire_init_L, config.fire_eps)


class FromConfigCUnread(FIRE):
    """Built from a model's config (``ModelConfig``, which declares ``fire_init_c``) without
    reading ``fire_init_c``: c starts at 0.1 whatever the config says."""

    def __init__(self, config: ModelConfig):
        super().__init__(config.num_attention_heads, config.fire_mlp_width, 0.1,
                         config.fire_init_L, config.fire_eps)


class DetachedInTrainingWithDropout(DetachedInTraining):
    """``DetachedInTraining`` with a dropout on f_θ's hidden layer: its train-mode output changes
    from call to call, which had kept the detached normaliser from being compared (audit 34);
    the glue's training call turns torch's dropouts off, and the rest is compared."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        first, act, out = self.mlp
        self.mlp = nn.Sequential(first, act, nn.Dropout(0.1), out)


class DetachedInTrainingFunctionalDropout(DetachedInTraining):
    """The same with ``F.dropout(..., training=self.training)`` on the bias, no ``nn.Dropout``."""

    def forward(self, x: torch.Tensor):
        return torch.nn.functional.dropout(super().forward(x), p=0.1, training=self.training)


class DetachedInTrainingImportedDropout(DetachedInTraining):
    """The same with the dropout imported by a name of the module's own (``from
    torch.nn.functional import dropout``), which patching ``torch.nn.functional`` misses."""

    def forward(self, x: torch.Tensor):
        return imported_dropout(super().forward(x), p=0.1, training=self.training)


class DetachedInTrainingTorchDropout(DetachedInTraining):
    """The same with the op itself, ``torch.dropout(bias, p, train)``."""

    def forward(self, x: torch.Tensor):
        return torch.dropout(super().forward(x), 0.1, self.training)


class DetachedWholeInTraining(FIRE):
    """The whole bias ``.detach()``-ed in train mode: right in eval mode, where the glue grades,
    and nothing of FIRE learns in training (its train-mode output carries no gradient, which the
    comparison had taken for a path it could not run)."""

    def forward(self, x: torch.Tensor):
        bias = super().forward(x)
        return bias.detach() if self.training else bias


class ZeroInitialisedMLP(FIRE):
    """f_θ initialised to zeros, weights and biases (audit 38: it passed, the cases loading f_θ's
    values over it): no gradient ever reaches its weights."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)
        with torch.no_grad():
            for p in self.mlp.parameters():
                p.zero_()


class ZeroInitialisedOutputLayer(FIRE):
    """Correct: only f_θ's output layer starts at zero (a common choice: the bias starts at 0
    and the hidden layer still learns once the output layer has)."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)
        with torch.no_grad():
            self.mlp[2].weight.zero_()
            self.mlp[2].bias.zero_()


class SplitThreshold(FIRE):
    """The threshold's factors split otherwise: L_multiplier starts at 0.5 and init_L at 1 024
    (the same L = 512): the multiplier's gradient is twice the spec's (audit 38: blamed on a
    detach or a hand-written backward)."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=1024.0, eps=1e-6):
        super().__init__(num_heads, mlp_width, init_c, init_L, eps)
        with torch.no_grad():
            self.L_multiplier.fill_(0.5)
