#!/usr/bin/env python3
"""PyTorch baseline for the fast-FIRE benchmark: the paper's Appendix E module plus
`scaled_dot_product_attention` with the FIRE bias as a float mask, on the same shapes as
`fire-lm bench --kernel-lengths ... --multiples` (12 heads, head dim 64,
causal, N = 2048, 8192[, 32768]).

torch is not a dependency of this repository. To run it (measured results in
accelerated/README.md, "Speed against PyTorch"):

    python3 -m venv /tmp/torch
    /tmp/torch/bin/pip install torch numpy
    #   (PyPI's wheel, ~5 GB with its CUDA libraries; the CPU-only index
    #    https://download.pytorch.org/whl/cpu is smaller where it is reachable)
    /tmp/torch/bin/python accelerated/benches/torch_fire.py --lengths 2048,8192 --repeats 3

It prints one markdown row per (variant, N): median seconds, ratio to SDPA without a bias,
and the process's peak RSS. The materialised bias alone is H·N²·4 bytes (3 GiB at N = 8192,
48 GiB at N = 32768), so a length whose bias exceeds 24 GiB is skipped unless --allow-oom.
"""

import argparse
import resource
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class FIRE(nn.Module):
    """Appendix E's module: 0-based positions, returns the bias as [1, H, N, N]."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(1, mlp_width), nn.ReLU(), nn.Linear(mlp_width, num_heads)
        )
        self.c = nn.Parameter(torch.tensor(init_c))
        self.init_L = nn.Parameter(torch.tensor(init_L), requires_grad=False)
        self.L_multiplier = nn.Parameter(torch.tensor(1.0))
        self.eps = eps

    def forward(self, x):
        seq_length = x.size(1)
        positions = torch.arange(seq_length, dtype=torch.float, device=x.device)
        rel_distance = positions[:, None] - positions[None, :]
        threshold = torch.abs(self.L_multiplier * self.init_L)
        pos_normalizer = torch.max(positions, threshold)[:, None]
        rel_distance = torch.log(torch.abs(self.c * rel_distance) + 1)
        pos_normalizer = torch.log(torch.abs(self.c * pos_normalizer) + 1) + self.eps
        normalized = rel_distance / pos_normalizer
        fire_bias = self.mlp(normalized.unsqueeze(-1))
        return fire_bias.unsqueeze(0).permute(0, 3, 1, 2)


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


@torch.no_grad()
def run(variant, fire, q, k, v, causal):
    if variant == "sdpa-nope":
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    bias = fire(q.transpose(1, 2))  # [1, H, N, N]
    if variant == "fire-bias-only":
        return bias
    mask = bias.masked_fill(~causal, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lengths", default="2048,8192")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--allow-oom", action="store_true")
    a = p.parse_args()
    torch.manual_seed(0)
    fire = FIRE(num_heads=a.heads)
    print(f"threads: {torch.get_num_threads()}")
    print("| what | N | median s | ratio | peak RSS MiB (process) |")
    print("|---|---|---|---|---|")
    for n in [int(s) for s in a.lengths.split(",")]:
        bias_bytes = a.heads * n * n * 4
        if bias_bytes > 24 * 2**30 and not a.allow_oom:
            print(f"| torch-sdpa-fire (skipped: bias {bias_bytes / 2**30:.0f} GiB) | {n} | - | - | - |")
            continue
        q, k, v = (torch.rand(1, a.heads, n, a.dim) * 2 - 1 for _ in range(3))
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        times = {}
        for _ in range(a.repeats):
            for variant in ["sdpa-nope", "fire-bias-only", "sdpa-fire"]:
                t = time.perf_counter()
                run(variant, fire, q, k, v, causal)
                times.setdefault(variant, []).append(time.perf_counter() - t)
        base = statistics.median(times["sdpa-nope"])
        for variant, ts in times.items():
            m = statistics.median(ts)
            print(f"| torch-{variant} | {n} | {m:.4f} | {m / base:.3f} | {peak_rss_mib():.0f} |")


if __name__ == "__main__":
    main()
