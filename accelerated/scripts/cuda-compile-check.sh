#!/usr/bin/env bash
# Proves `fire-accelerated` builds with `--features cuda` on a machine without a GPU or a system
# CUDA: installs (once) the pinned CUDA 13.0 toolkit from PyPI with cuda-toolchain.sh, then
# builds every target of the crate (lib, fire-lm, tests, benches), linking against the toolkit's
# libraries and the stub libcuda. Nothing is run: that needs a GPU (see gpu-check.sh).
#
#   accelerated/scripts/cuda-compile-check.sh [--check] [extra cargo args...]
#
# --check runs `cargo check` instead of `cargo build`: it still runs candle-kernels' build script
# (nvcc compiles all its kernels either way, the bulk of the time) but skips codegen and linking,
# so it does not prove the link against the CUDA libraries. The default is the full build.
#
# Environment:
#   FIRE_CUDA_HOME        toolkit prefix (default ~/.cache/fire-cuda/13.0; cache it in CI)
#   FIRE_CUDA_TARGET_DIR  cargo target dir (default <repo>/target/cuda, apart from the CPU
#                         build, so switching features never rebuilds or overwrites CPU artifacts)
#   CUDA_COMPUTE_CAP      GPU architecture the kernels are built for (default 90: H100/H200)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$repo"

mode=build
if [[ "${1:-}" == "--check" ]]; then
  mode=check
  shift
fi

eval "$("$here/cuda-toolchain.sh" "${FIRE_CUDA_HOME:-$HOME/.cache/fire-cuda/13.0}")"
export CARGO_TARGET_DIR="${FIRE_CUDA_TARGET_DIR:-$repo/target/cuda}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# candle-kernels' build script (cudaforge) compiles its CUDA files on half the cores by default.
export CUDAFORGE_THREADS="${CUDAFORGE_THREADS:-$(nproc)}"

echo "cuda-compile-check: cargo $mode --features cuda with $(nvcc --version | tail -1)," \
  "CUDA_COMPUTE_CAP=$CUDA_COMPUTE_CAP, target dir $CARGO_TARGET_DIR" >&2
start=$SECONDS
# Lowest priority: the CI machine (and the dev machines) have few cores shared with other work.
nice -n 19 cargo "$mode" -p fire-accelerated --features cuda --all-targets --locked "$@"

if [[ "$mode" == build ]]; then
  bin="$CARGO_TARGET_DIR/debug/fire-lm"
  # The binary must want the driver's libcuda.so.1 by soname (never the stub by path) and the
  # toolkit's libraries: NVRTC compiles the fused attention kernel at run time (src/cuda.rs);
  # the linker drops cublasLt, which fire-lm never calls.
  needed="$(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
  echo "cuda-compile-check: fire-lm needs: $needed" >&2
  for lib in libcuda.so.1 libcudart.so.13 libcublas.so.13 libcurand.so.10 libnvrtc.so.13; do
    [[ " $needed " == *" $lib "* ]] || { echo "cuda-compile-check: fire-lm does not link $lib" >&2; exit 1; }
  done
  # Load it with the stub standing in for the driver: every symbol resolves, the CLI works, and
  # asking for the (absent) GPU is a clear error, not a crash.
  fake="$(mktemp -d)"
  trap 'rm -rf "$fake"' EXIT
  ln -s "$CUDA_HOME/lib/stubs/libcuda.so" "$fake/libcuda.so.1"
  LD_LIBRARY_PATH="$fake:$LD_LIBRARY_PATH" LD_BIND_NOW=1 "$bin" --help >/dev/null
  rc=0
  LD_LIBRARY_PATH="$fake:$LD_LIBRARY_PATH" "$bin" train --run "$fake/run" --steps 1 --quiet \
    --device cuda 2>"$fake/err" || rc=$?
  if [[ $rc != 1 ]] || ! grep -q CUDA "$fake/err"; then
    echo "cuda-compile-check: fire-lm --device cuda without a GPU should fail cleanly; got rc=$rc:" >&2
    cat "$fake/err" >&2
    exit 1
  fi
  echo "cuda-compile-check: without a GPU, fire-lm says: $(head -1 "$fake/err")" >&2
fi
echo "cuda-compile-check: ok (cargo $mode, $((SECONDS - start)) s)" >&2
