#!/usr/bin/env python3
"""PyTorch on the same GPU as our fused CUDA kernel (tests/cuda_timing.rs), same shapes: 12 heads
of 64, causal, one sequence. Run by gpu-device.sh with the image's python3 (it holds PyTorch).

- `torch-sdpa-f32`: `scaled_dot_product_attention(is_causal=True)` without a bias, f32 (the
  dtype of our kernel);
- `torch-sdpa-bf16`: the same in bf16 (flash attention), for scale;
- `torch-fire-sdpa-f32`: Appendix E's FIRE module (accelerated/benches/torch_fire.py, copied into
  the bundle) materialising the [1, H, N, N] bias, plus SDPA with it as a float mask — only where
  its intermediates fit the card (not at N = 32 768: the MLP's hidden layer alone is 128 GiB).

Prints one `TIMING {json}` line per measurement (median of --repeats after one warm-up; wall
clock around a synchronised call, as the Rust timing does).
"""

import argparse
import importlib.util
import json
import statistics
import time

import torch
import torch.nn.functional as F


def timed(fn, repeats):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times), min(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lengths", default="8192,32768")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--fire-module", help="path of torch_fire.py (Appendix E's module)")
    a = p.parse_args()
    assert torch.cuda.is_available(), "torch sees no CUDA device"
    dev = torch.device("cuda")
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name(0)}")
    fire = None
    if a.fire_module:
        try:
            spec = importlib.util.spec_from_file_location("torch_fire", a.fire_module)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            torch.manual_seed(0)
            fire = mod.FIRE(num_heads=a.heads).to(dev)
        except Exception as e:  # the FIRE row is optional
            print(f"no Appendix E module ({e}); timing SDPA only")
    free = torch.cuda.mem_get_info()[0]
    for n in [int(s) for s in a.lengths.split(",")]:
        torch.manual_seed(0)
        q, k, v = (torch.rand(1, a.heads, n, a.dim, device=dev) * 2 - 1 for _ in range(3))
        pairs = a.heads * n * (n + 1) / 2
        runs = {
            "torch-sdpa-f32": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        }
        qb, kb, vb = (t.bfloat16() for t in (q, k, v))
        runs["torch-sdpa-bf16"] = lambda: F.scaled_dot_product_attention(qb, kb, vb, is_causal=True)
        # Appendix E's module holds [N, N, 32] hidden + [N, N, H] output + the mask, in f32.
        need = n * n * 4 * (32 + 2 * a.heads + 2)
        if fire is not None and need < 0.6 * free:
            causal = torch.ones(n, n, dtype=torch.bool, device=dev).tril()

            @torch.no_grad()
            def fire_sdpa():
                bias = fire(q.transpose(1, 2)).masked_fill(~causal, float("-inf"))
                return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)

            runs["torch-fire-sdpa-f32"] = fire_sdpa
        elif fire is not None:
            print(f"N = {n}: Appendix E's FIRE needs ~{need / 2**30:.0f} GiB; skipped")
        for name, fn in runs.items():
            with torch.no_grad():
                median, best = timed(fn, a.repeats)
            print("TIMING " + json.dumps({
                "variant": name, "n": n, "heads": a.heads, "head_dim": a.dim,
                "repeats": a.repeats, "median_s": median, "min_s": best,
                "causal_pairs_per_s": pairs / median,
                "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
            }), flush=True)
        del q, k, v, qb, kb, vb
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
