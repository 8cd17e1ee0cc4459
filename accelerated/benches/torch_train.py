#!/usr/bin/env python3
"""A plain PyTorch twin of `fire-lm train`'s model and step, for speed comparisons.

The same shape and recipe as ours: byte vocabulary (256), token embedding tied to the head,
pre-LayerNorm blocks (eps 1e-5), q/k/v/o projections without bias, a GeLU (erf) MLP with
biases, a final LayerNorm; N(0, 0.02) initialisation with the residual projections scaled by
1/sqrt(2·layers); cross-entropy; global-norm clipping at 1.0; AdamW (β 0.9/0.95, ε 1e-8, weight
decay 0.1 on matrices but not on the encoding's parameters). Attention is PyTorch's
`scaled_dot_product_attention`: `is_causal=True` for NoPE, a float mask (bias plus −inf above
the diagonal) for FIRE (Appendix E's module per layer), FIRE-S (one module, bias computed once
per forward) and Kerple-log (−r1·ln(1 + r2·|i − j|), r1, r2 ≥ 0.01 per head and layer).

Used by `side_by_side.py` (which runs each side in its own process, so the peak resident size
is per side); alone:

    python3 accelerated/benches/torch_train.py --encoding fire --steps 40 --d-model 128 \
        --layers 4 --heads 4 --d-ff 512 --seq-len 128 --batch 16

prints one JSON line: seconds per step (median and min over the steps after `--skip`),
tokens/s, the losses and the peak RSS.
"""

import argparse
import json
import math
import resource
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Fire(nn.Module):
    """Appendix E's module (0-based positions), bias [1, H, N, N]."""

    def __init__(self, heads, width=32, c=0.1, l_init=512.0, eps=1e-6):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(1, width), nn.ReLU(), nn.Linear(width, heads))
        self.c = nn.Parameter(torch.tensor(c))
        self.init_L = nn.Parameter(torch.tensor(l_init), requires_grad=False)
        self.L_multiplier = nn.Parameter(torch.tensor(1.0))
        self.eps = eps

    def forward(self, n):
        positions = torch.arange(n, dtype=torch.float)
        rel = positions[:, None] - positions[None, :]
        threshold = torch.abs(self.L_multiplier * self.init_L)
        norm = torch.max(positions, threshold)[:, None]
        rel = torch.log(torch.abs(self.c * rel) + 1)
        norm = torch.log(torch.abs(self.c * norm) + 1) + self.eps
        return self.mlp((rel / norm).unsqueeze(-1)).permute(2, 0, 1).unsqueeze(0)


class KerpleLog(nn.Module):
    def __init__(self, heads):
        super().__init__()
        self.bias_p = nn.Parameter(torch.rand(heads, 1, 1) * 2)
        self.bias_a = nn.Parameter(torch.rand(heads, 1, 1))

    def forward(self, n):
        p = torch.arange(n, dtype=torch.float)
        dist = (p[:, None] - p[None, :]).abs()
        r1 = self.bias_p.clamp(min=1e-2)
        r2 = self.bias_a.clamp(min=1e-2)
        return (-r1 * torch.log1p(r2 * dist)).unsqueeze(0)


class Block(nn.Module):
    def __init__(self, d, heads, d_ff, layers, encoding):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d, eps=1e-5)
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)
        self.ln2 = nn.LayerNorm(d, eps=1e-5)
        self.fc1 = nn.Linear(d, d_ff)
        self.fc2 = nn.Linear(d_ff, d)
        self.fire = Fire(heads) if encoding == "fire" else None
        self.kerple = KerpleLog(heads) if encoding == "kerple-log" else None
        out_std = 0.02 / math.sqrt(2 * layers)
        for lin, std in [(self.q_proj, 0.02), (self.k_proj, 0.02), (self.v_proj, 0.02),
                         (self.o_proj, out_std), (self.fc1, 0.02), (self.fc2, out_std)]:
            nn.init.normal_(lin.weight, std=std)
            if lin.bias is not None:
                nn.init.zeros_(lin.bias)

    def forward(self, x, shared_bias, mask):
        b, n, d = x.shape
        h = self.ln1(x)
        split = lambda t: t.view(b, n, self.heads, d // self.heads).transpose(1, 2)
        q, k, v = split(self.q_proj(h)), split(self.k_proj(h)), split(self.v_proj(h))
        bias = shared_bias
        if self.fire is not None:
            bias = self.fire(n)
        elif self.kerple is not None:
            bias = self.kerple(n)
        if bias is None:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=bias + mask)
        x = x + self.o_proj(a.transpose(1, 2).reshape(b, n, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Model(nn.Module):
    def __init__(self, vocab, d, layers, heads, d_ff, encoding):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        nn.init.normal_(self.embed.weight, std=0.02)
        self.blocks = nn.ModuleList(Block(d, heads, d_ff, layers, encoding) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d, eps=1e-5)
        self.fire = Fire(heads) if encoding == "fire-s" else None

    def forward(self, tokens):
        n = tokens.shape[1]
        mask = torch.full((n, n), float("-inf")).triu(1)
        shared = self.fire(n) if self.fire is not None else None
        x = self.embed(tokens)
        for blk in self.blocks:
            x = blk(x, shared, mask)
        return self.ln_f(x) @ self.embed.weight.t()


def optimizer(model, lr):
    decay, rest = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        encoding = "fire" in name or "kerple" in name
        (decay if p.dim() >= 2 and not encoding else rest).append(p)
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8)


def train(a):
    torch.manual_seed(a.seed)
    model = Model(256, a.d_model, a.layers, a.heads, a.d_ff, a.encoding)
    opt = optimizer(model, a.lr)
    gen = torch.Generator().manual_seed(a.seed + 1)
    times, losses = [], []
    for _ in range(a.steps):
        tokens = torch.randint(0, 256, (a.batch, a.seq_len + 1), generator=gen)
        x, y = tokens[:, :-1], tokens[:, 1:]
        t = time.perf_counter()
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, 256), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t)
        losses.append(loss.item())
    steady = times[a.skip:] or times
    med = statistics.median(steady)
    return {
        "side": "torch",
        "encoding": a.encoding,
        "s_per_step": med,
        "min_s_per_step": min(steady),
        "tokens_per_s": a.batch * a.seq_len / med,
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "threads": torch.get_num_threads(),
    }


def parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--encoding", default="fire", choices=["fire", "fire-s", "nope", "kerple-log"])
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-ff", type=int, default=512)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--skip", type=int, default=10, help="steps not timed (warm-up)")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    return p


if __name__ == "__main__":
    args = parser().parse_args()
    torch.set_num_threads(args.threads)
    print(json.dumps(train(args)))
