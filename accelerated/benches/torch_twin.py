#!/usr/bin/env python3
"""A PyTorch twin of `fire-lm`'s model and training step, for training parity.

The model (pre-LayerNorm decoder, GeLU MLP, tied head; FIRE, FIRE-S, NoPE, RoPE, Alibi,
Kerple-log/-power, T5) is written from the architecture's description with PyTorch's own
layers, under `fire-lm`'s state-dict names, so a fire-lm checkpoint loads 1:1 and a twin
checkpoint is a fire-lm run that `fire-lm eval` reads. The optimiser is `torch.optim.AdamW`,
the clip `torch.nn.utils.clip_grad_norm_`: an independent check of fire-lm's own AdamW and clip.

Subcommands:

  replay   Start from a run's recorded initial weights and replay its recorded batches
           (`fire-lm train --record DIR`): the loss and gradient norm of every step must match
           the run's metrics.jsonl within --atol. Prints the worst step; exit 0 pass, 1 fail.
  parity   The whole check in one command: trains fire-lm (CPU) for --steps steps with --record
           and per-step metrics for each --encodings, replays each, prints a table; exit 0 when
           every encoding passes.
  train    Train a twin model with its own batches (the same sampler as fire-lm with the same
           seed, or windows inside documents) and its own initialisation (fire-lm's or
           PyTorch's defaults), writing a fire-lm run directory: the recipe experiments.
  eval     Log-perplexity of a run (fire-lm's or the twin's) at several lengths on the same
           held-out windows as `fire-lm eval` (a cross-check of the evaluation).

torch is not a dependency of this repository; any recent CPU build works (used: torch 2.15,
numpy). Run by hand, from the repository root, after `cargo build --release -p
fire-accelerated --bin fire-lm`:

  python3 accelerated/benches/torch_twin.py parity --corpus /usr/share/doc/python3.11/html/_sources

The committed results and what they showed: accelerated/results/figure1/README.md.
"""

import argparse
import json
import math
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# --------------------------------------------------------------------------- safetensors

_DT = {"F32": (torch.float32, 4), "F64": (torch.float64, 8), "I64": (torch.int64, 8),
       "U8": (torch.uint8, 1)}


def load_safetensors(path):
    data = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        dtype, _ = _DT[meta["dtype"]]
        a, b = meta["data_offsets"]
        buf = bytearray(data[8 + n + a:8 + n + b])
        t = torch.frombuffer(buf, dtype=dtype) if buf else torch.empty(0, dtype=dtype)
        out[name] = t.reshape(meta["shape"]).clone()
    return out


def save_safetensors(tensors, path):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to(torch.float32).contiguous()
        raw = t.numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = Path(str(path) + ".tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)

# --------------------------------------------------------------------------- the model


class Symlog(nn.Module):
    """sign(z)·ln(1 + |z|): log1p on z >= 0 (Theorem 3.1's Kerple-log construction)."""

    def forward(self, z):
        return torch.sign(z) * torch.log1p(z.abs())


def activation(name):
    return {"relu": nn.ReLU(), "gelu": nn.GELU(), "identity": nn.Identity(), "symlog": Symlog()}[name]


class Fire(nn.Module):
    """f_θ(ψ(|i−j|) / (ψ(max(i, L)) + ε)), ψ(x) = ln(|c|x + 1), L = |m·init_L|; 0-based."""

    def __init__(self, cfg, heads):
        super().__init__()
        mods, fan_in = [], 1
        for n in range(cfg["depth"] + 1):
            out = heads if n == cfg["depth"] else cfg["width"]
            mods.append(nn.Linear(fan_in, out))
            if n < cfg["depth"]:
                mods.append(activation(cfg["activation"]))
            fan_in = out
        if cfg.get("final_activation"):
            mods.append(activation(cfg["final_activation"]))
        self.mlp = nn.Sequential(*mods)
        self.c = nn.Parameter(torch.tensor(float(cfg["c"])))
        self.init_L = nn.Parameter(torch.tensor(float(cfg["l_init"])), requires_grad=False)
        self.L_multiplier = nn.Parameter(torch.tensor(float(cfg["l_multiplier"])),
                                         requires_grad=cfg["threshold"] == "learnable")
        self.eps, self.transform, self.threshold = cfg["eps"], cfg["transform"], cfg["threshold"]

    def psi(self, x):
        return torch.log(x * self.c.abs() + 1.0) if self.transform == "log" else x

    def forward(self, queries, keys):
        dist = (queries[:, None] - keys[None, :]).abs()
        i = queries
        if self.threshold != "disabled":
            i = torch.maximum(queries, (self.L_multiplier * self.init_L).abs())
        x = self.psi(dist) / (self.psi(i) + self.eps)[:, None]
        return self.mlp(x.unsqueeze(-1)).permute(2, 0, 1)


class Kerple(nn.Module):
    def __init__(self, form, heads):
        super().__init__()
        self.form = form
        self.bias_p = nn.Parameter(torch.empty(heads, 1, 1).uniform_(0.0, 2.0))
        self.bias_a = nn.Parameter(torch.empty(heads, 1, 1).uniform_(0.0, 1.0))

    def forward(self, queries, keys):
        d = (queries[:, None] - keys[None, :]).abs().unsqueeze(0)
        p = self.bias_p.clamp_min(1e-2)
        if self.form == "log":
            k = torch.log(d * self.bias_a.clamp_min(1e-2) + 1.0)
        else:
            k = torch.where(d == 0, torch.zeros(()), torch.exp(self.bias_a.clamp(1e-2, 2.0) * torch.log(d.clamp_min(1.0))))
        return -(k * p)


def t5_bucket(n, num_buckets, max_distance):
    """The official causal bucket, in binary32 as mesh-tensorflow computes it."""
    max_exact = num_buckets // 2
    if n < max_exact:
        return n
    ratio = np.float32(n) / np.float32(max_exact)
    log = np.float32(math.log(float(ratio)))
    span = np.float32(math.log(max_distance / max_exact))
    scaled = (log / span) * np.float32(num_buckets - max_exact)
    return min(max_exact + int(scaled), num_buckets - 1)


class T5Bias(nn.Module):
    def __init__(self, num_buckets, max_distance, heads, std):
        super().__init__()
        self.relative_attention_bias = nn.Embedding(num_buckets, heads)
        nn.init.normal_(self.relative_attention_bias.weight, std=std)
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self._ids = {}

    def forward(self, queries, keys):
        key = (int(queries[0]), len(queries), len(keys))
        if key not in self._ids:
            q = queries.long().tolist()
            k = keys.long().tolist()
            table = [t5_bucket(d, self.num_buckets, self.max_distance) for d in range(max(q) + 1)]
            self._ids[key] = torch.tensor([[table[max(i - j, 0)] for j in k] for i in q])
        return self.relative_attention_bias(self._ids[key]).permute(2, 0, 1)


def alibi_slopes(heads):
    def pow2(n):
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]
    if heads & (heads - 1) == 0:
        return pow2(heads)
    p = 1 << (heads.bit_length() - 1)
    return pow2(p) + pow2(2 * p)[::2][: heads - p]


def rope_tables(positions, head_dim, theta, scale):
    half = head_dim // 2
    p = np.asarray(positions, dtype=np.float64)[:, None] / scale
    freq = theta ** (-2.0 * np.arange(half, dtype=np.float64) / head_dim)
    ang = p * freq[None, :]
    return (torch.from_numpy(np.cos(ang).astype(np.float32)),
            torch.from_numpy(np.sin(ang).astype(np.float32)))


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)
        self.heads, self.head_dim = heads, d // heads

    def forward(self, x, bias, rope, mask):
        b, t, d = x.shape
        split = lambda y: y.reshape(b, t, self.heads, self.head_dim).transpose(1, 2)
        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        if rope is not None:
            q, k = rotate(q, *rope), rotate(k, *rope)
        logits = q @ k.transpose(-1, -2) * (1.0 / math.sqrt(self.head_dim))
        if bias is not None:
            logits = logits + bias
        out = torch.softmax(logits + mask, dim=-1) @ v
        return self.o_proj(out.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, d, heads, d_ff, eps):
        super().__init__()
        self.ln1 = nn.LayerNorm(d, eps=eps)
        self.attn = Attention(d, heads)
        self.ln2 = nn.LayerNorm(d, eps=eps)
        self.mlp = nn.ModuleDict({"fc1": nn.Linear(d, d_ff), "fc2": nn.Linear(d_ff, d)})

    def forward(self, x, bias, rope, mask):
        x = x + self.attn(self.ln1(x), bias, rope, mask)
        return x + self.mlp["fc2"](F.gelu(self.mlp["fc1"](self.ln2(x))))


class Model(nn.Module):
    """fire-lm's decoder; parameter names are its state-dict names."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        d, h, layers = cfg["d_model"], cfg["n_heads"], cfg["n_layers"]
        self.embed = nn.Embedding(cfg["vocab_size"], d)
        self.layers = nn.ModuleList(Block(d, h, cfg["d_ff"], cfg["layer_norm_eps"]) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d, eps=cfg["layer_norm_eps"])
        if not cfg.get("tie_embeddings", True):
            self.lm_head = nn.Linear(d, cfg["vocab_size"], bias=False)
        enc = cfg["encoding"]
        self.kind = enc["kind"]
        if self.kind == "fire":
            for blk in self.layers:
                blk.attn.fire = Fire(enc, h)
        elif self.kind == "fire-s":
            self.fire = Fire(enc, h)
        elif self.kind in ("kerple-log", "kerple-power"):
            for blk in self.layers:
                blk.attn.kerple = Kerple(self.kind.split("-")[1], h)
        elif self.kind == "t5":
            self.rel_pos = T5Bias(enc.get("num_buckets", 32), enc.get("max_distance", 128), h,
                                  cfg.get("init_std", 0.02))
        elif self.kind == "alibi":
            self.register_buffer("slopes", torch.tensor(alibi_slopes(h), dtype=torch.float32).reshape(h, 1, 1),
                                 persistent=False)
        elif self.kind not in ("nope", "rope", "rope-pi"):
            raise SystemExit(f"torch_twin: encoding {self.kind} is not in the twin")

    def init_like_fire_lm(self, std):
        """fire-lm --init gpt2 (GPT-2's scheme; fire-lm's default before fan-in): N(0, std²)
        embedding and projections, residual projections std/√(2·layers), zero biases; FIRE's
        f_θ keeps nn.Linear's."""
        out_std = std / math.sqrt(2 * len(self.layers))
        with torch.no_grad():
            nn.init.normal_(self.embed.weight, std=std)
            for blk in self.layers:
                for p in (blk.attn.q_proj, blk.attn.k_proj, blk.attn.v_proj, blk.mlp["fc1"]):
                    nn.init.normal_(p.weight, std=std)
                for p in (blk.attn.o_proj, blk.mlp["fc2"]):
                    nn.init.normal_(p.weight, std=out_std)
                nn.init.zeros_(blk.mlp["fc1"].bias)
                nn.init.zeros_(blk.mlp["fc2"].bias)
            if hasattr(self, "lm_head"):
                nn.init.normal_(self.lm_head.weight, std=std)

    def biases(self, n, start=0):
        pos = torch.arange(start, start + n, dtype=torch.float32)
        L = len(self.layers)
        if self.kind == "fire":
            return [blk.attn.fire(pos, pos) for blk in self.layers]
        if self.kind == "fire-s":
            return [self.fire(pos, pos)] * L
        if self.kind.startswith("kerple"):
            return [blk.attn.kerple(pos, pos) for blk in self.layers]
        if self.kind == "t5":
            return [self.rel_pos(pos, pos)] * L
        if self.kind == "alibi":
            return [-(pos[:, None] - pos[None, :]).abs().unsqueeze(0) * self.slopes] * L
        return [None] * L

    def forward(self, tokens, start=0):
        n = tokens.shape[1]
        enc = self.cfg["encoding"]
        rope = None
        if self.kind in ("rope", "rope-pi"):
            rope = rope_tables(range(start, start + n), self.cfg["d_model"] // self.cfg["n_heads"],
                               enc.get("theta", 10000.0), enc.get("scale", 1.0))
        mask = torch.full((n, n), float("-inf")).triu(1)
        x = self.embed(tokens)
        for blk, bias in zip(self.layers, self.biases(n, start)):
            x = blk(x, bias, rope, mask)
        x = self.ln_f(x)
        w = self.lm_head.weight if hasattr(self, "lm_head") else self.embed.weight
        return x @ w.t()


def load_weights(model, tensors):
    sd = model.state_dict()
    missing = [k for k in sd if k not in tensors]
    extra = [k for k in tensors if k not in sd]
    if missing or extra:
        raise SystemExit(f"torch_twin: state dicts differ: missing {missing}, unexpected {extra}")
    with torch.no_grad():
        for k, v in sd.items():
            if tuple(v.shape) != tuple(tensors[k].shape):
                raise SystemExit(f"torch_twin: {k}: shape {tuple(tensors[k].shape)}, expected {tuple(v.shape)}")
            v.copy_(tensors[k])

# --------------------------------------------------------------------------- the training step


def decays(name, rank):
    """fire-lm's rule: matrices only, and never the encodings' own parameters."""
    enc = "fire" in name or "kerple" in name or "rel_pos" in name
    return rank >= 2 and not enc


def learning_rate(step, total, warmup, peak, min_ratio):
    if warmup > 0 and step < warmup:
        return peak * (step + 1) / warmup
    span = max(total - warmup, 1)
    progress = min((step - min(warmup, step)) / span, 1.0)
    return peak * (min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress)))


class Trainer:
    def __init__(self, model, tcfg):
        self.model, self.t = model, tcfg
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        a = tcfg["adamw"]
        groups = [
            {"params": [p for n, p in named if decays(n, p.dim())], "weight_decay": a["weight_decay"]},
            {"params": [p for n, p in named if not decays(n, p.dim())], "weight_decay": 0.0},
        ]
        self.params = [p for _, p in named]
        self.opt = torch.optim.AdamW(groups, lr=tcfg["lr"], betas=(a["beta1"], a["beta2"]), eps=a["eps"],
                                     foreach=False)

    def step(self, step, x, y):
        t = self.t
        logits = self.model(x, position_offset(t, step))
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        max_norm = t["clip"] if t["clip"] > 0 else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(self.params, max_norm)
        lr = learning_rate(step, t["steps"], t["warmup"], t["lr"], t["min_lr_ratio"])
        for g in self.opt.param_groups:
            g["lr"] = lr
        self.opt.step()
        return float(loss.detach()), float(norm), lr

# --------------------------------------------------------------------------- data (fire-lm's)

MASK64 = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK64

    def next_u64(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def below(self, n):
        return (self.next_u64() * max(n, 1)) >> 64


def position_offset(tcfg, step):
    """fire-lm's randomised position offset of a step (0 when the option is off)."""
    k = tcfg.get("position_offset", 0)
    if not k:
        return 0
    rng = SplitMix64(tcfg["seed"] ^ 0x0FF5E7F05EED ^ ((step * 0x9E3779B9) & MASK64))
    return rng.below(k + 1)


def fnv1a(s):
    h = 0xCBF29CE484222325
    for b in s.encode():
        h = ((h ^ b) * 0x100000001B3) & MASK64
    return h


def load_corpus(root):
    """Every file under root, sorted by path components (Rust's Path order), lossy UTF-8 bytes."""
    root = Path(root)
    files = sorted((p for p in root.rglob("*") if p.is_file()), key=lambda p: p.relative_to(root).parts)
    return [(str(p.relative_to(root)), p.read_bytes().decode("utf-8", "replace").encode()) for p in files]


def split_corpus(docs, held_out):
    cut = int(min(max(held_out, 0.0), 1.0) * float(2 ** 64))
    cut = min(cut, MASK64)
    ev = [d for d in docs if fnv1a(d[0]) < cut]
    tr = [d for d in docs if fnv1a(d[0]) >= cut]
    return tr, ev


class StreamSampler:
    """fire-lm's sampler: documents joined by a blank line, windows anywhere in the stream
    (so some cross a document boundary), starts drawn by SplitMix64(seed ^ 0xDA7A005EED)."""

    def __init__(self, train, seq_len, batch, seed):
        self.stream = np.frombuffer(b"".join(d + b"\n\n" for _, d in train), dtype=np.uint8).astype(np.int64)
        self.T, self.B = seq_len, batch
        self.rng = SplitMix64(seed ^ 0x00DA7A005EED)

    def next(self):
        span = len(self.stream) - self.T - 1
        starts = [self.rng.below(span + 1) for _ in range(self.B)]
        w = np.stack([self.stream[s:s + self.T + 1] for s in starts])
        return torch.from_numpy(w[:, :-1].copy()), torch.from_numpy(w[:, 1:].copy())


class DocumentSampler:
    """Windows that never cross a document boundary: uniform over every window of T + 1
    tokens inside one training document."""

    def __init__(self, train, seq_len, batch, seed):
        self.docs = [np.frombuffer(d, dtype=np.uint8).astype(np.int64) for _, d in train if len(d) > seq_len + 1]
        counts = np.array([len(d) - seq_len for d in self.docs], dtype=np.float64)
        self.cum = np.cumsum(counts)
        self.T, self.B = seq_len, batch
        self.rng = np.random.default_rng(seed)

    def next(self):
        r = self.rng.integers(0, int(self.cum[-1]), size=self.B)
        ws = []
        for v in r:
            k = int(np.searchsorted(self.cum, v, side="right"))
            s = int(v - (self.cum[k - 1] if k else 0))
            ws.append(self.docs[k][s:s + self.T + 1])
        w = np.stack(ws)
        return torch.from_numpy(w[:, :-1].copy()), torch.from_numpy(w[:, 1:].copy())


def eval_spans(ev, longest, max_spans):
    eligible = [np.frombuffer(d, dtype=np.uint8).astype(np.int64) for _, d in ev if len(d) > longest]
    out, k = [], 0
    while True:
        any_ = False
        for d in eligible:
            s = k * longest
            if s + longest < len(d):
                any_ = True
                out.append(d[s:s + longest + 1])
                if len(out) >= max(max_spans, 1):
                    return out
        if not any_:
            return out
        k += 1


@torch.no_grad()
def evaluate(model, ev, lengths, max_windows, batch=4, split_at=None):
    spans = eval_spans(ev, max(lengths), max_windows)
    res = []
    for n in lengths:
        wins = [s[w * n:w * n + n + 1] for s in spans for w in range((len(s) - 1) // n)]
        nll = np.zeros(n)
        for i in range(0, len(wins), batch):
            g = torch.from_numpy(np.stack(wins[i:i + batch]))
            logp = torch.log_softmax(model(g[:, :-1]), dim=-1)
            picked = -logp.gather(-1, g[:, 1:].unsqueeze(-1)).squeeze(-1)
            nll += picked.double().sum(0).numpy()
        r = {"length": n, "windows": len(wins), "tokens": len(wins) * n, "log_ppl": float(nll.sum() / (len(wins) * n))}
        if split_at and n > split_at:
            r["log_ppl_before"] = float(nll[:split_at].sum() / (len(wins) * split_at))
            r["log_ppl_after"] = float(nll[split_at:].sum() / (len(wins) * (n - split_at)))
        res.append(r)
    return res

# --------------------------------------------------------------------------- runs


def read_run(run):
    cfg = json.loads((Path(run) / "config.json").read_text())
    return cfg["model"], cfg["train"]


def read_metrics(run):
    return [json.loads(l) for l in (Path(run) / "metrics.jsonl").read_text().splitlines() if l.strip()]


def checkpoint_tensors(run):
    run = Path(run)
    d = run if (run / "state.json").is_file() else run / "checkpoints" / (run / "latest").read_text().strip()
    return load_safetensors(d / "model.safetensors"), json.loads((d / "state.json").read_text())


def write_run(run, model, mcfg, tcfg, step, metrics):
    """A fire-lm run directory (config, metrics, one checkpoint) that fire-lm can evaluate."""
    run = Path(run)
    ck = run / "checkpoints" / f"step-{step:07d}"
    ck.mkdir(parents=True, exist_ok=True)
    (run / "config.json").write_text(json.dumps({"model": mcfg, "train": tcfg}, indent=2))
    save_safetensors({k: v for k, v in model.state_dict().items()}, ck / "model.safetensors")
    state = {"step": step, "rng": {"state": 0}, "model": mcfg, "train": tcfg}
    (ck / "state.json").write_text(json.dumps(state, indent=2))
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    (run / "latest").write_text(ck.name)


def cmd_replay(a):
    mcfg, tcfg = read_run(a.run)
    model = Model(mcfg)
    load_weights(model, load_safetensors(Path(a.record) / "init.safetensors"))
    raw = np.fromfile(Path(a.record) / "batches.u32", dtype="<u4").astype(np.int64)
    per = 2 * tcfg["batch"] * tcfg["seq_len"]
    steps = min(a.steps or len(raw) // per, len(raw) // per)
    want = {m["step"]: m for m in read_metrics(a.run)}
    trainer = Trainer(model, tcfg)
    worst, rows = (0.0, 0), []
    for s in range(steps):
        xy = torch.from_numpy(raw[s * per:(s + 1) * per].reshape(2, tcfg["batch"], tcfg["seq_len"]))
        loss, norm, lr = trainer.step(s, xy[0], xy[1])
        w = want.get(s + 1)
        if w is None:
            raise SystemExit(f"torch_twin: {a.run}/metrics.jsonl has no line for step {s + 1} (log_every must be 1)")
        d = abs(loss - w["loss"])
        rows.append((s + 1, w["loss"], loss, d, w["grad_norm"], norm))
        worst = max(worst, (d, s + 1))
    if a.verbose:
        print("step  fire-lm loss  twin loss  |diff|     fire-lm |g|  twin |g|")
        for r in rows:
            print(f"{r[0]:4d}  {r[1]:.6f}  {r[2]:.6f}  {r[3]:.2e}  {r[4]:.5f}  {r[5]:.5f}")
    gn = max(abs(r[4] - r[5]) / max(r[4], 1e-12) for r in rows)
    ok = worst[0] <= a.atol
    print(f"{mcfg['encoding']['kind']}: {steps} steps, loss {rows[0][1]:.4f} -> {rows[-1][1]:.4f}; "
          f"max |loss diff| {worst[0]:.2e} (step {worst[1]}), max rel |grad-norm diff| {gn:.2e}: "
          f"{'PASS' if ok else 'FAIL'} (atol {a.atol:g})")
    return {"encoding": mcfg["encoding"]["kind"], "steps": steps, "max_loss_diff": worst[0],
            "at_step": worst[1], "max_rel_grad_norm_diff": gn, "pass": ok,
            "first_loss": rows[0][1], "last_loss": rows[-1][1]}


def cmd_parity(a):
    out = Path(a.out)
    train_yaml = out / "train.yaml"
    out.mkdir(parents=True, exist_ok=True)
    train_yaml.write_text(
        f"seq_len: {a.seq_len}\nbatch: {a.batch}\nsteps: {a.total_steps}\nwarmup: {a.warmup}\nlr: {a.lr}\n"
        "min_lr_ratio: 0.1\nclip: 1.0\n"
        f"adamw: {{beta1: 0.9, beta2: 0.95, eps: 1.0e-8, weight_decay: {a.weight_decay}}}\n"
        f"held_out: 0.15\nlog_every: 1\ncheckpoint_every: 1000000\nposition_offset: {a.position_offset}\n")
    results = []
    for item in a.encodings.split(","):
        enc, _, model_yaml = item.partition(":")
        run, rec = out / enc, out / f"{enc}.record"
        if not (run / "latest").exists():
            shape = (["--config", model_yaml] if model_yaml else
                     ["--encoding", enc, "--d-model", str(a.d_model), "--layers", str(a.layers),
                      "--heads", str(a.heads), "--d-ff", str(a.d_ff), "--fire-l-init", str(a.fire_l_init),
                      "--init", a.init])
            cmd = [a.fire_lm, "train", "--run", str(run), "--record", str(rec), *shape,
                   "--train-config", str(train_yaml), "--stop-after", str(a.steps), "--seed", str(a.seed),
                   "--quiet"]
            if a.corpus:
                cmd += ["--corpus", a.corpus]
            if a.attention:
                cmd += ["--attention", a.attention]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        results.append(cmd_replay(argparse.Namespace(run=run, record=rec, steps=a.steps, atol=a.atol,
                                                     verbose=a.verbose)))
    (out / "parity.json").write_text(json.dumps(results, indent=2))
    ok = all(r["pass"] for r in results)
    print(f"parity: {'PASS' if ok else 'FAIL'} ({sum(r['pass'] for r in results)}/{len(results)} encodings); "
          f"worst {max(r['max_loss_diff'] for r in results):.2e}; wrote {out}/parity.json")
    return 0 if ok else 1


def cmd_train(a):
    mcfg = json.loads(Path(a.model_config).read_text()) if a.model_config else None
    tcfg = json.loads(Path(a.train_config).read_text())
    if mcfg is None:
        raise SystemExit("torch_twin train: --model-config is required")
    torch.manual_seed(a.seed)
    model = Model(mcfg)
    if a.init in ("gpt2", "fire-lm"):
        model.init_like_fire_lm(mcfg.get("init_std", 0.02))
    elif a.init == "torch-fan-in":
        # PyTorch's defaults for every nn.Linear (U(±1/√fan_in)); the tied embedding kept at
        # N(0, std²) (PyTorch's N(0, 1) would start the tied head at a loss far above ln 256).
        with torch.no_grad():
            nn.init.normal_(model.embed.weight, std=mcfg.get("init_std", 0.02))
    elif a.init.startswith("fan-in:"):
        # fire-lm's GPT-2 scheme except the listed projections (q, k, v, o, fc1, fc2), which
        # keep nn.Linear's default: which part of the initialisation matters.
        keep = set(a.init.split(":", 1)[1].split(","))
        saved = {n: p.detach().clone() for n, p in model.named_parameters()}
        model.init_like_fire_lm(mcfg.get("init_std", 0.02))
        with torch.no_grad():
            for n, p in model.named_parameters():
                proj = n.split(".")[-2] if n.count(".") >= 2 else ""
                if proj.replace("_proj", "") in keep:
                    p.copy_(saved[n])
    tcfg = dict(tcfg, seed=a.seed, corpus=a.corpus)
    docs = load_corpus(a.corpus)
    tr, ev = split_corpus(docs, tcfg["held_out"])
    sampler = (StreamSampler if a.sampler == "stream" else DocumentSampler)(tr, tcfg["seq_len"], tcfg["batch"], a.seed)
    trainer = Trainer(model, tcfg)
    metrics, t0 = [], time.time()
    steps = a.steps or tcfg["steps"]
    for s in range(steps):
        x, y = sampler.next()
        loss, norm, lr = trainer.step(s, x, y)
        if (s + 1) % 10 == 0 or s + 1 == steps:
            el = time.time() - t0
            metrics.append({"step": s + 1, "loss": loss, "lr": lr, "grad_norm": norm, "elapsed_s": el,
                            "tokens_per_s": (s + 1) * tcfg["batch"] * tcfg["seq_len"] / el})
        if (s + 1) % 200 == 0:
            print(f"step {s + 1} loss {loss:.4f} {metrics[-1]['tokens_per_s']:.0f} tok/s", flush=True)
    write_run(a.run, model, mcfg, dict(tcfg, steps=steps), steps, metrics)
    print(f"trained {steps} steps in {time.time() - t0:.0f} s; wrote {a.run}")


def cmd_eval(a):
    tensors, state = checkpoint_tensors(a.run)
    model = Model(state["model"])
    load_weights(model, tensors)
    model.eval()
    docs = load_corpus(state["train"]["corpus"])
    _, ev = split_corpus(docs, state["train"]["held_out"])
    res = evaluate(model, ev, [int(x) for x in a.lengths.split(",")], a.max_windows, split_at=a.split_at)
    for r in res:
        print(json.dumps(r))
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=2))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=int(os.environ.get("TWIN_THREADS", "1")))
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("replay")
    r.add_argument("--run", required=True, help="the fire-lm run (config.json, metrics.jsonl with log_every 1)")
    r.add_argument("--record", required=True, help="its --record directory")
    r.add_argument("--steps", type=int, default=0)
    r.add_argument("--atol", type=float, default=1e-4)
    r.add_argument("-v", "--verbose", action="store_true")
    q = sub.add_parser("parity")
    q.add_argument("--fire-lm", default="target/release/fire-lm")
    q.add_argument("--out", default="runs/parity")
    q.add_argument("--encodings", default="fire,fire-s,kerple-log,alibi,t5,rope,nope",
                   help="comma list of fire-lm encodings, or LABEL:MODEL.yaml for a model config")
    q.add_argument("--position-offset", type=int, default=0, help="fire-lm's randomised position offsets")
    q.add_argument("--init", default="fan-in", help="fire-lm's --init (fan-in or gpt2)")
    q.add_argument("--steps", type=int, default=50)
    q.add_argument("--total-steps", type=int, default=2400, help="the schedule's length (warm-up and cosine)")
    q.add_argument("--warmup", type=int, default=100)
    q.add_argument("--lr", type=float, default=1e-3)
    q.add_argument("--weight-decay", type=float, default=0.01)
    q.add_argument("--seq-len", type=int, default=128)
    q.add_argument("--batch", type=int, default=16)
    q.add_argument("--d-model", type=int, default=128)
    q.add_argument("--layers", type=int, default=4)
    q.add_argument("--heads", type=int, default=4)
    q.add_argument("--d-ff", type=int, default=512)
    q.add_argument("--fire-l-init", type=float, default=32)
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--corpus", default=None, help="default: fire-lm's embedded corpus")
    q.add_argument("--attention", default=None, help="fire-lm's training attention (default: fused)")
    q.add_argument("--atol", type=float, default=1e-4)
    q.add_argument("-v", "--verbose", action="store_true")
    t = sub.add_parser("train")
    t.add_argument("--run", required=True)
    t.add_argument("--model-config", required=True, help="JSON: a fire-lm ModelConfig")
    t.add_argument("--train-config", required=True, help="JSON: a fire-lm TrainConfig")
    t.add_argument("--corpus", required=True)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--steps", type=int, default=0)
    t.add_argument("--init", default="gpt2",
                   help="gpt2 (fire-lm --init gpt2; also spelt fire-lm, its default when the recipe runs were made) "
                        "| torch-fan-in (what fire-lm --init fan-in draws from) "
                        "| fan-in:LIST (gpt2, except that the LIST of q,k,v,o,fc1,fc2 keep nn.Linear's default)")
    t.add_argument("--sampler", choices=["stream", "document"], default="stream")
    e = sub.add_parser("eval")
    e.add_argument("run")
    e.add_argument("--lengths", default="128,256,512,1024,2048")
    e.add_argument("--max-windows", type=int, default=16)
    e.add_argument("--split-at", type=int, default=None)
    e.add_argument("--out", default=None)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    if a.cmd == "replay":
        sys.exit(0 if cmd_replay(a)["pass"] else 1)
    if a.cmd == "parity":
        sys.exit(cmd_parity(a))
    if a.cmd == "train":
        cmd_train(a)
    if a.cmd == "eval":
        cmd_eval(a)


if __name__ == "__main__":
    main()
