#!/usr/bin/env bash
# FOR A GPU MACHINE THAT HAS A RUST TOOLCHAIN AND NETWORK ACCESS (PyPI, crates.io) ONLY.
# The device tool's machines have neither: there, use the prebuilt bundle instead —
# gpu-bundle.sh builds it here, gpu-device.sh runs it there, gpu-dry-run.sh proves it here
# (accelerated/README.md, "The GPU check on a lent machine"). This script would fail at its
# first download there and spend the device time for nothing.
#
# On a machine with an NVIDIA GPU (driver for CUDA >= 13.0): builds fire-lm with `--features
# cuda`, trains a tiny FIRE model for 50 steps on the GPU, evaluates it on the GPU and on the CPU,
# and checks that the two agree; then runs the CUDA-vs-CPU parity test of FIRE's bias and one
# forward pass (accelerated/tests/cuda_parity.rs). Estimated 4-5 minutes on a fresh 16-core GPU
# machine (toolkit download ~40 s, cold build ~3-4 min, checks ~30 s); seconds when warm.
#
#   accelerated/scripts/gpu-check.sh [OUT_DIR]     (default: target/gpu-check)
#
# Uses the same pinned toolkit as cuda-compile-check.sh; no system CUDA is needed, only the
# driver. Set CUDA_COMPUTE_CAP for GPUs other than Hopper (default 90).
set -euo pipefail
command -v cargo >/dev/null ||
  { echo "gpu-check: no cargo here; on a machine without a toolchain use gpu-bundle.sh + gpu-device.sh" >&2; exit 1; }
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$repo"
out="$(mkdir -p "${1:-target/gpu-check}" && cd "${1:-target/gpu-check}" && pwd)"

step() { printf '\n==> %s\n' "$*"; }
fail() { printf 'gpu-check: FAILED: %s\n' "$*" >&2; exit 1; }

step "GPU and driver"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader ||
  fail "nvidia-smi found no GPU"

step "toolkit and build (cuda-compile-check.sh: every target, --features cuda)"
# One dev-profile build (its dependencies are optimised) serves fire-lm and the parity test.
export CUDAFORGE_THREADS="${CUDAFORGE_THREADS:-$(nproc)}"
"$here/cuda-compile-check.sh"
eval "$("$here/cuda-toolchain.sh" "${FIRE_CUDA_HOME:-$HOME/.cache/fire-cuda/13.0}")"
export CARGO_TARGET_DIR="${FIRE_CUDA_TARGET_DIR:-$repo/target/cuda}"
# The stub libcuda must never be loaded here: the driver's real one has to be found.
[[ "$LD_LIBRARY_PATH" != *stubs* ]] || fail "LD_LIBRARY_PATH contains a stubs directory"
lm="$CARGO_TARGET_DIR/debug/fire-lm"
ldd "$lm" | grep -E 'libcuda\.|libcudart|libcublas\.|libcurand|libnvrtc'
! ldd "$lm" | grep -q 'not found' || fail "fire-lm cannot find all its libraries (is the driver installed?)"

run="$out/fire-cuda"
rm -rf "$run"
step "train 50 steps on CUDA"
"$lm" train --run "$run" --encoding fire --fire-l-init 16 --seq-len 64 --batch 8 \
  --steps 50 --warmup 5 --seed 0 --checkpoint-every 50 --quiet --device cuda | tee "$out/train.txt"

step "evaluate the same checkpoint on CUDA (fused kernel, and the candle path) and on CPU"
"$lm" eval "$run" --lengths 64,128,256 --max-windows 4 --out "$out/eval-cuda" --device cuda
"$lm" eval "$run" --lengths 64,128,256 --max-windows 4 --out "$out/eval-cuda-candle" \
  --device cuda --attention materialised
"$lm" eval "$run" --lengths 64,128,256 --max-windows 4 --out "$out/eval-cpu" --device cpu

step "compare"
python3 - "$run" "$out" <<'PY'
import json, sys
run, out = sys.argv[1], sys.argv[2]
# The model must learn on CUDA: metrics.jsonl has a line every 10 steps; a byte model that has
# learned nothing sits at ln(256) = 5.55 nats/token (the CPU reaches ~3.2 in these 50 steps).
losses = [json.loads(line)["loss"] for line in open(f"{run}/metrics.jsonl")]
print(f"loss: step 10 {losses[0]:.4f}, step 50 {losses[-1]:.4f} ({len(losses)} records)")
assert len(losses) == 5, "expected 5 metrics lines for 50 steps"
assert losses[-1] < losses[0] and losses[-1] < 4.0, "the loss did not fall on CUDA"
cpu = json.load(open(f"{out}/eval-cpu/eval.json"))[0]["results"]
for kind in ["eval-cuda", "eval-cuda-candle"]:
    cuda = json.load(open(f"{out}/{kind}/eval.json"))[0]["results"]
    worst = 0.0
    for g, c in zip(cuda, cpu):
        d = abs(g["log_ppl"] - c["log_ppl"])
        worst = max(worst, d)
        print(f"{kind} length {g['length']:5}: log-ppl CUDA {g['log_ppl']:.6f}  CPU {c['log_ppl']:.6f}  |diff| {d:.2e}")
    assert len(cuda) == len(cpu) == 3, "eval did not produce three lengths on both devices"
    assert worst < 1e-3, f"{kind}: CUDA and CPU log-perplexities differ by {worst}"
print("eval: CUDA (fused kernel and candle path) matches CPU")
PY

step "FIRE bias, one forward pass and the fused kernel, CUDA vs CPU"
if [[ -f accelerated/tests/cuda_parity.rs ]]; then
  FIRE_PARITY_RUN="$run" cargo test --locked -p fire-accelerated --features cuda \
    --test cuda_parity -- --ignored --nocapture
else
  fail "accelerated/tests/cuda_parity.rs is missing: FIRE's bias was not compared (everything above passed)"
fi

printf '\ngpu-check: ok (outputs in %s)\n' "$out"
