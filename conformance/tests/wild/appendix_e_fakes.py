"""Small "wild" FIRE modules shaped like the paper's Appendix E, in NumPy, one per symptom a user
has met: each computes in the dtype of the parameters it is loaded with and differs from a
correct module in exactly the way its docstring says. ``tests/wild.rs`` drives each through
``adapters/appendix_e.py`` and asserts the harness's exact verdict and diagnosis.
"""

import dataclasses
import typing

import numpy as np


class Correct:
    """Appendix E, literally: forward(x) with T = x.shape[2], output [1, H, T, T]."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        self.num_heads, self.eps = num_heads, eps

    def load_state_dict(self, state):
        self.s = state
        self.dt = state["c"].dtype
        self.eps = self.dt.type(self.eps)

    def positions(self, seq_len):
        return np.arange(seq_len, dtype=self.dt)

    def psi(self, x):
        return np.log(np.abs(self.s["c"] * x) + 1)

    def threshold(self):
        return np.abs(self.s["L_multiplier"] * self.s["init_L"])

    def normalizer(self, pos):
        return self.psi(np.maximum(pos, self.threshold())) + self.eps

    def numerator(self, rel):
        return self.psi(rel)

    def mlp(self, x):
        s = self.s
        h = np.maximum(x[..., None] @ s["mlp.0.weight"].T + s["mlp.0.bias"], 0)
        return h @ s["mlp.2.weight"].T + s["mlp.2.bias"]

    def bias(self, seq_len):
        pos = self.positions(seq_len)
        rel = np.abs(pos[:, None] - pos[None, :])
        x = self.numerator(rel) / self.normalizer(pos)[:, None]
        return np.transpose(self.mlp(x), (2, 0, 1))[None]

    def __call__(self, x):
        return self.bias(x.shape[2])


class PositionsClamped(Correct):
    """Appendix E with its positions clamped to 511 (``arange(T).clamp(max=511)``, a table of 512
    positions' habit): right up to T = 512, every position past 511 read as 511 beyond."""

    def positions(self, seq_len):
        return np.minimum(np.arange(seq_len), 511).astype(self.dt)


class PositionsInBfloat16(Correct):
    """Appendix E with its positions held in bfloat16 (a buffer cast with the model), emulated:
    each rounded to 8 significant bits, exact only up to 256."""

    def positions(self, seq_len):
        p = np.arange(seq_len, dtype=np.float32)
        bits = p.view(np.uint32)
        # Round to nearest even on the 16 bits bfloat16 drops.
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
        return rounded.view(np.float32).astype(self.dt)


class HeadsLast(Correct):
    """Appendix E without its final permute: the bias returned as [1, T, T, H]."""

    def __call__(self, x):
        return np.transpose(self.bias(x.shape[2]), (0, 2, 3, 1))


class TransposedAbove(Correct):
    """A causal decoder's FIRE: the triangle computed, the keys after the query filled by
    transposing it, so b(j, i) there, normalised by the key (audit 30). Right under
    ``--future-keys negated``; under the default only the keys after the query differ."""

    def __call__(self, x):
        b = self.bias(x.shape[2])
        return np.tril(b) + np.swapaxes(np.tril(b, -1), -1, -2)


class EpsTwice(Correct):
    """Adds ε to the numerator as well."""

    def numerator(self, rel):
        return self.psi(rel) + self.eps


class EpsThreePlaces(Correct):
    """ε in the numerator, inside ψ of the normaliser and added to it."""

    def numerator(self, rel):
        return self.psi(rel) + self.eps

    def normalizer(self, pos):
        return self.psi(np.maximum(pos, self.threshold()) + self.eps) + self.eps


class MinThreshold(Correct):
    """Normalises by ψ(min(i, L))."""

    def normalizer(self, pos):
        return self.psi(np.minimum(pos, self.threshold())) + self.eps


class NoAbsC(Correct):
    """ln(c·x + 1) without |c|: NaN wherever c·x < −1."""

    def psi(self, x):
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.log(self.s["c"] * x + 1)


class ClampedC(Correct):
    """c clamped to at least 1e-4 where |c| is specified."""

    def psi(self, x):
        return np.log(np.maximum(self.s["c"], self.dt.type(1e-4)) * x + 1)


class SeqLenDevice(Correct):
    """Correct, but called as forward(seq_length, device) and returning [H, T, T]."""

    def __call__(self, seq_length, device):
        return self.bias(seq_length)[0]


class QueryKeyLengths(Correct):
    """Correct, called as x-transformers' relative position modules are: forward(i, j), the bias
    of the last i of j positions over all j, [H, i, j]."""

    def __call__(self, i, j):
        return self.bias(j)[0][:, j - i:, :]


class QueryKeyStates(Correct):
    """Correct, called with the attention's query and key tensors, [B, H, n, D] and [B, H, T, D],
    reading only their lengths: the bias of the last n of T positions over all T (audit 31)."""

    def __call__(self, q, k):
        n, T = q.shape[-2], k.shape[-2]
        return self.bias(T)[:, :, T - n:, :]


class ScoresFromStates(QueryKeyStates):
    """Correct, returning the attention logits q·kᵀ/√d + bias for the query and key tensors:
    the bias itself where they are zeros."""

    def __call__(self, q, k):
        return q @ np.swapaxes(k, -1, -2) * q.shape[-1] ** -0.5 + super().__call__(q, k)


class ScoresFromStatesUnscaled(QueryKeyStates):
    """The attention logits without 1/√d: q·kᵀ + bias (audit 32: with the zero tensors of head
    dimension 1 the graded call hands, it passed)."""

    def __call__(self, q, k):
        return q @ np.swapaxes(k, -1, -2) + super().__call__(q, k)


class StatesFirstRows(Correct):
    """forward(q, k) returning the first n query rows of the T x T square where the queries are
    the last n: a decoding step gets the bias of query 0."""

    def __call__(self, q, k):
        return self.bias(k.shape[-2])[:, :, :q.shape[-2], :]


class ComputeBias(Correct):
    """Correct, called as Hugging Face's ``compute_bias(query_length, key_length, device=None)``,
    returning [1, H, query_length, key_length]."""

    def __call__(self, query_length, key_length, device=None):
        return self.bias(key_length)[:, :, key_length - query_length:, :]


class HiddenStates(Correct):
    """Correct, but reads the length from x.shape[1]: x is a block's hidden states [B, T, D], as
    GPT-style copies of Appendix E call it."""

    def __call__(self, x):
        return self.bias(x.shape[1])


class PastLength(Correct):
    """Correct, Hugging Face's decoding step: forward(hidden_states, past_key_values_length=0),
    the new tokens at past..past+T-1 over every key 0..past+T-1. ``keys_from_zero``: the keys
    counted over the new tokens alone (``arange(T)``); ``offset_ignored``: the queries too."""

    keys_from_zero = False
    offset_ignored = False

    def __call__(self, hidden_states, past_key_values_length=0):
        T, past = hidden_states.shape[1], past_key_values_length
        keys = np.arange(T if self.keys_from_zero else past + T, dtype=self.dt)
        queries = np.arange(0 if self.offset_ignored else past, (0 if self.offset_ignored else past) + T,
                            dtype=self.dt)
        x = self.numerator(np.abs(queries[:, None] - keys[None, :])) / self.normalizer(queries)[:, None]
        return np.transpose(self.mlp(x), (2, 0, 1))[None]


class PastLengthKeysFromZero(PastLength):
    """With a cache, the keys counted from the new tokens (audit 32: the offset was never used,
    and it passed)."""

    keys_from_zero = True


class PastLengthIgnored(PastLength):
    """The keys over the cache, the queries counted from 0 as if there were none: the new
    tokens get the first rows' bias."""

    offset_ignored = True


class PastLengthOneTokenBehind(PastLength):
    """A generation step's one new token (``T == 1`` with a cache) put at ``past − 1``: right on
    every prefill, off by one on every token generated (audit 35: it passed, the probe caching
    half the square)."""

    def __call__(self, hidden_states, past_key_values_length=0):
        if hidden_states.shape[1] == 1 and past_key_values_length > 0:
            return self.one_behind(past_key_values_length)
        return super().__call__(hidden_states, past_key_values_length)

    def one_behind(self, past):
        keys = np.arange(past + 1, dtype=self.dt)
        query = np.asarray([past - 1], dtype=self.dt)
        x = self.numerator(np.abs(query[:, None] - keys[None, :])) / self.normalizer(query)[:, None]
        return np.transpose(self.mlp(x), (2, 0, 1))[None]


class ScoresPlusBias(Correct):
    """Correct, but takes the attention scores [B, H, T, T], reads the length from their last
    dimension and returns scores + bias."""

    def __call__(self, scores):
        return scores + self.bias(scores.shape[-1])


class ScoresDropped(Correct):
    """Takes the attention scores [B, H, T, T] to add its bias to, and returns the bias alone,
    broadcast to their shape: in a model the attention logits are replaced by the bias."""

    def __call__(self, scores):
        return np.broadcast_to(self.bias(scores.shape[-1]), scores.shape)


class ScoresScaled(Correct):
    """Takes the attention scores and returns scores / 8 + bias: the scores changed by more than
    the bias added to them."""

    def __call__(self, scores):
        return scores / 8 + self.bias(scores.shape[-1])


class ScoresTanh(Correct):
    """Takes the attention scores and returns tanh(scores) + bias (a soft cap applied inside the
    module): the scores changed, by no one factor."""

    def __call__(self, scores):
        return np.tanh(scores) + self.bias(scores.shape[-1])


class LengthFromLastAxis(Correct):
    """Correct: forward(x) reads the length from x.shape[-1] (the x it is written for is [.., T]),
    and returns the bias alone: x's values mean nothing to it."""

    def __call__(self, x):
        return self.bias(x.shape[-1])


class XLeaksIntoBias(Correct):
    """Appendix E's forward(x), but returns x * 0.125 + bias (x broadcast over the keys): the
    hidden states leak into the bias. With x of zeros it is exactly the bias."""

    def __call__(self, x):
        return x * 0.125 + self.bias(x.shape[2])


class XLeaksThroughTheBatch(Correct):
    """Appendix E's forward(x), plus x less its mean over the batch (a normalisation across the
    sequences): zero wherever every sequence of x is the same, as the glue's first probe has
    them."""

    def __call__(self, x):
        return self.bias(x.shape[2]) + (x - x.mean(axis=0, keepdims=True))


class XPlusBias(Correct):
    """Correct: forward(x) takes x for the attention scores [B, H, T, T] (a parameter named x, not
    scores), reads the length from x.shape[2] and returns x + bias."""

    def __call__(self, x):
        return x + self.bias(x.shape[2])


class LengthsFirstRows(Correct):
    """forward(query_length, key_length) returning the first query_length rows of the key_length
    square where the queries are the last: a decoding step (one query after cached keys) gets the
    bias of query 0. Right under T5's convention (``--query-rows first``), whose caller slices."""

    def __call__(self, query_length, key_length):
        return self.bias(key_length)[0][:, :query_length, :]


class PositionList(Correct):
    """Correct, given the positions themselves: forward(positions) returns the bias of every pair
    of them, [H, n, n]."""

    def rows(self, pos):
        x = self.numerator(np.abs(pos[:, None] - pos[None, :])) / self.normalizer(pos)[:, None]
        return np.transpose(self.mlp(x), (2, 0, 1))

    def __call__(self, positions):
        return self.rows(np.asarray(positions, dtype=self.dt))


class PositionListThroughFloat32(PositionList):
    """forward(positions) computing in its dtype, but the positions cast to float32 on the way
    (a float64 module with a float32 position buffer): exact up to 2^24, rounded past it (audit
    38: named as float16's rounding, which holds no position past 65 504)."""

    def __call__(self, positions):
        return self.rows(np.asarray(positions, dtype=np.float32).astype(self.dt))


class PaddingMask(PositionList):
    """Correct, Hugging Face's way: forward(attention_mask) of a padding mask [B, T], the
    positions made from it (``attention_mask.cumsum(-1) - 1``, padding at 0), one bias per
    sequence [B, H, T, T]. Called with a mask of ones (audit 32: given token ids of zeros, every
    token was padding, every position 0, and the run failed as a stale cache)."""

    one_based = False

    def __call__(self, attention_mask):
        mask = np.asarray(attention_mask)
        positions = np.cumsum(mask, axis=-1) - (0 if self.one_based else 1)
        positions = np.where(mask == 0, 0, positions)
        return np.stack([self.rows(p.astype(self.dt)) for p in positions])


class AdditiveMask(Correct):
    """Correct: forward(attention_mask) of the additive mask Hugging Face builds, [B, 1, T, T]
    (``_update_causal_mask``), returned with the bias added: attention scores to the glue, not a
    padding mask (audit 32: the padding mask tried alone had called it broken)."""

    def __call__(self, attention_mask):
        return attention_mask + self.bias(attention_mask.shape[-1])


class PaddingMaskOneBased(PaddingMask):
    """The same with ``- 1`` forgotten: positions start at 1 (the catalogue's
    ``one-based-positions``)."""

    one_based = True


class PositionTable(PositionList):
    """Correct within its context: forward(positions) looks each position up in a table of 4 096
    (a model's ``max_position_embeddings``), so a position past it is an IndexError — graded up
    to the context it declares with ``--max-len 4096``, as the same module behind forward(x)
    would be."""

    def __call__(self, positions):
        table = np.arange(4096, dtype=self.dt)
        return self.rows(table[np.asarray(positions)])


class PositionListAsIndices(PositionList):
    """forward(positions), but counts 0..n-1 in place of the positions it is given (the
    catalogue's positions-as-indices): right on 0..T-1, wrong on gapped positions."""

    def __call__(self, positions):
        return self.rows(np.arange(len(positions), dtype=self.dt))


class LengthFromFirstAxis(Correct):
    """Reads the length from x.shape[0]: one sequence of hidden states [T, D], no batch
    (Equinox's convention, a module vmapped over the batch), the glue's ``sequence`` layout."""

    def __call__(self, x):
        return self.bias(x.shape[0])


class ExpectsModelWidth(Correct):
    """Takes hidden states [B, T, 768] only (a projection of the model's width), which no layout
    of x the glue tries holds: no call gives a bias."""

    def __call__(self, x):
        if x.ndim != 3 or x.shape[-1] != 768:
            raise ValueError(f"expected hidden states [B, T, 768], got {list(x.shape)}")
        return self.bias(x.shape[1])


class Batched(Correct):
    """Correct, returning the bias repeated over a batch of 3: [3, H, T, T]."""

    def __call__(self, x):
        return np.repeat(self.bias(x.shape[2]), 3, axis=0)


class AttentionMask(Correct):
    """Correct: ``nn.MultiheadAttention``'s ``attn_mask`` for a batch of hidden states [B, T, D],
    [B·H, T, T] batch-major (the heads' bias tiled once per sequence)."""

    def __call__(self, x):
        return np.tile(self.bias(x.shape[1])[0], (x.shape[0], 1, 1))


class AttentionMaskInterleaved(Correct):
    """``attn_mask`` [B·H, T, T] head-major (each head's bias repeated once per sequence, a
    ``repeat_interleave``), where ``nn.MultiheadAttention`` reads it batch-major: right at B = 1,
    the wrong heads for every sequence at B > 1."""

    def __call__(self, x):
        return np.repeat(self.bias(x.shape[1])[0], x.shape[0], axis=0)


class BatchHeadsInterleaved(Correct):
    """[B, H, T, T] built as [H·B, T, T] head-major and viewed as [B, H, T, T]: right at B = 1,
    the heads of the sequences mixed up at B > 1."""

    def __call__(self, x):
        b = self.bias(x.shape[2])[0]
        return np.repeat(b, x.shape[0], axis=0).reshape(x.shape[0], *b.shape)


class AssertsHiddenStates(HiddenStates):
    """Correct, from hidden states [B, T, D], asserting their rank: Appendix E's x fails the
    ``assert`` rather than a shape check."""

    def __call__(self, x):
        assert x.ndim == 3, f"expected hidden states [batch, seq, dim], got {x.shape}"
        return super().__call__(x)


class Float32Only(Correct):
    """Correct, but hard-codes float32 whatever it is loaded with."""

    def load_state_dict(self, state):
        super().load_state_dict({k: np.asarray(v, dtype=np.float32) for k, v in state.items()})


class QueryKeyPositions(Correct):
    """Correct, and given the case's query and key positions: forward(query_pos, key_pos)."""

    def forward(self, query_pos, key_pos):
        q = np.asarray(query_pos, dtype=self.dt)
        k = np.asarray(key_pos, dtype=self.dt)
        x = self.numerator(np.abs(q[:, None] - k[None, :])) / self.normalizer(q)[:, None]
        return np.transpose(self.mlp(x), (2, 0, 1))

    __call__ = forward


class Float16(Correct):
    """Correct, but computes in float16, which has no tolerance profile."""

    def load_state_dict(self, state):
        super().load_state_dict({k: np.asarray(v, dtype=np.float16) for k, v in state.items()})


class ThresholdIgnoredOnLongInputs(Correct):
    """A "fast path" for long inputs that normalises by ψ(i) (the threshold dropped) and, having
    been written against float32 buffers, returns float32 there: in the dtype asked on short
    inputs, another on long ones, whose cases must fail rather than skip as a dtype the module
    cannot compute in."""

    def bias(self, seq_len):
        if seq_len <= 256:
            return super().bias(seq_len)
        pos = np.arange(seq_len, dtype=np.float32)
        rel = np.abs(pos[:, None] - pos[None, :])
        x = self.psi(rel) / (self.psi(pos) + self.eps)[:, None]
        return np.transpose(self.mlp(x), (2, 0, 1))[None].astype(np.float32)


class AlwaysRaises(Correct):
    """Glue that cannot call the module: forward needs an argument no caller gives."""

    def __call__(self, x, attention_mask):
        return self.bias(x.shape[2])


class ReturnsTuple(Correct):
    """Correct bias, returned with the normalised distances for logging: forward gives a tuple."""

    def __call__(self, x):
        return self.bias(x.shape[2]), None


class PositionIds(PositionList):
    """Correct, taking ``position_ids`` of one sequence, [1, n], as Hugging Face models pass them
    (it unpacks ``batch, n = position_ids.shape``): had been "adapter broken" (audit 21)."""

    def __call__(self, position_ids):
        batch, n = np.shape(position_ids)
        return self.rows(np.asarray(position_ids, dtype=self.dt)[0])[None]


_BIASES = {}


class CachedAcrossInstances(Correct):
    """Appendix E with its bias cached in a module-level dict keyed on the length alone: every
    instance after the first with a given length gets the first one's bias, whatever its
    parameters (in a model, every layer the first layer's)."""

    def __call__(self, x):
        T = x.shape[2]
        if T not in _BIASES:
            _BIASES[T] = self.bias(T)
        return _BIASES[T]


class TokenIds(Correct):
    """Correct, called as nanoGPT calls its model: forward(idx) with ``idx`` a batch of token ids
    [B, T], read only for its length."""

    def __call__(self, idx):
        B, T = np.shape(idx)
        return self.bias(T)


class IdxPositionsCounted(Correct):
    """forward(idx) taking a list of positions [n] and computing the bias of 0..n−1 whatever
    they are: it ignores the positions it is given (gapped, unsorted, KV-cache rows)."""

    def __call__(self, idx):
        return self.bias(len(np.asarray(idx)))[0]


class ScoresShapeOnly(Correct):
    """Correct where its callers add the bias: forward(attn_weights) reads only their length and
    returns the bias alone."""

    def __call__(self, attn_weights):
        return self.bias(np.shape(attn_weights)[-1])


class ConfigConstructor(Correct):
    """Correct, constructed from one config object (``__init__(self, config)``, Hugging Face's
    way), reading ε with a default as code does of an optional entry."""

    def __init__(self, config):
        super().__init__(config.num_attention_heads, config.fire_mlp_width,
                         eps=getattr(config, "fire_eps", 1e-6))


class ConfigAny(ConfigConstructor):
    """``ConfigConstructor`` with its config annotated ``typing.Any``, as Flax code declares a
    ``config: Any`` field: no config class to read defaults from (it had crashed the glue)."""

    def __init__(self, config: typing.Any):
        super().__init__(config)


@dataclasses.dataclass
class FireConfig:
    """A config class of a model that uses FIRE: the model's own entries beside FIRE's."""
    hidden_size: int = 768
    num_attention_heads: int = 12
    layer_norm_eps: float = 1e-5
    fire_hidden_size: int = 32
    fire_init_c: float = 0.1
    fire_init_L: float = 512.0
    fire_epsilon: float = 1e-6


class ConfigDataclass(Correct):
    """Correct, ``__init__(self, config: FireConfig)``, reading FIRE's entries under a prefix."""

    def __init__(self, config: FireConfig):
        super().__init__(config.num_attention_heads, config.fire_hidden_size, config.fire_init_c,
                         config.fire_init_L, config.fire_epsilon)


class ConfigLayerNormEps(Correct):
    """Normalises with the model's layer-norm ε (``config.layer_norm_eps``, 10⁻⁵ in its config
    class) rather than FIRE's own, which the class declares (``fire_epsilon``): within float32's
    tolerance at the spec's ε, not elsewhere."""

    def __init__(self, config: FireConfig):
        super().__init__(config.num_attention_heads, config.fire_hidden_size, eps=config.layer_norm_eps)


class ConfigAndEps(Correct):
    """Correct, its shape read from a config and its ε an argument of its own beside it
    (``__init__(self, config, eps=1e-6)``)."""

    def __init__(self, config, eps=1e-6):
        super().__init__(config.num_attention_heads, config.fire_mlp_width, eps=eps)


class ConfigNoFireEps(Correct):
    """Built from a config that holds no ε of FIRE's (not annotated), normalising with the
    model's layer-norm ε where the config has one: an ε of its own, graded at the spec's."""

    def __init__(self, config):
        super().__init__(config.num_attention_heads, config.fire_mlp_width,
                         eps=getattr(config, "layer_norm_eps", 1e-6))


class ConfigNested(Correct):
    """Correct, FIRE's settings in an entry of the model's config read as a dict
    (``config.position_encoding["mlp_width"]``, ``.get("eps", 1e-6)``), as configs that name
    their position encoding by type hold them."""

    def __init__(self, config):
        fire = config.position_encoding
        super().__init__(config.num_attention_heads, fire["mlp_width"], fire.get("init_c", 0.1),
                         fire.get("init_L", 512.0), fire.get("eps", 1e-6))


class ConfigHiddenSize(Correct):
    """Correct, but FIRE's MLP width read as ``config.hidden_size``, which most configs give the
    model's width: the glue answers it only where told to."""

    def __init__(self, config):
        super().__init__(config.n_head, config.hidden_size, config.c0, config.l0, config.eps)


class PositionsNamedT(Correct):
    """Correct, ``forward(t)`` with ``t`` the positions (a name that reads as a length)."""

    def __call__(self, t):
        pos = np.asarray(t, dtype=self.dt)
        x = self.numerator(np.abs(pos[:, None] - pos[None, :])) / self.normalizer(pos)[:, None]
        return np.transpose(self.mlp(x), (2, 0, 1))
