#!/usr/bin/env python3
"""torch's `a @ b` at the shapes of `cargo run --release -p fire-kernels --example
gemm_timing`: GFLOP/s of the median of N calls (default 40), on --threads threads (default 2).
A measurement, not a test; torch is not a dependency of the repository."""

import argparse
import statistics
import time

import torch

# (name, m, k, n, left transposed, right transposed): as in examples/gemm_timing.rs.
SHAPES = [
    ("large x·Wqkvᵀ", 2048, 256, 768, False, True),
    ("large h·W1ᵀ", 2048, 256, 1024, False, True),
    ("large g·W2ᵀ", 2048, 1024, 256, False, True),
    ("large dy·W2", 2048, 256, 1024, False, False),
    ("large dW2 = dyᵀ·g", 256, 2048, 1024, True, False),
    ("large dW1 = dzᵀ·h", 1024, 2048, 256, True, False),
    ("large dWqkv = dqkvᵀ·h", 768, 2048, 256, True, False),
    ("small x·Wqkvᵀ", 2048, 128, 384, False, True),
    ("small dW1 = dzᵀ·h", 512, 2048, 128, True, False),
    ("small dW2 = dyᵀ·g", 128, 2048, 512, True, False),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("calls", nargs="?", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(f"{a.threads} threads, median of {a.calls} calls, GFLOP/s")
    print("| product | m × k × n | torch |")
    print("|---|---|---|")
    for name, m, k, n, ta, tb in SHAPES:
        lhs = torch.rand(k, m).t() if ta else torch.rand(m, k)
        rhs = torch.rand(n, k).t() if tb else torch.rand(k, n)
        out = torch.empty(m, n)
        seconds = []
        for _ in range(a.calls):
            start = time.perf_counter()
            torch.matmul(lhs, rhs, out=out)
            seconds.append(time.perf_counter() - start)
        gflops = 2 * m * k * n / statistics.median(seconds) / 1e9
        print(f"| {name} | {m} × {k} × {n} | {gflops:.0f} |")


if __name__ == "__main__":
    main()
