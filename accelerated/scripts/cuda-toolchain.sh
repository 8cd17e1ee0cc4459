#!/usr/bin/env bash
# The CUDA 13.0 toolkit from PyPI, laid out as a CUDA_HOME, for building `fire-accelerated`
# with `--features cuda` on any x86_64 Linux machine, with or without a GPU.
#
#   eval "$(accelerated/scripts/cuda-toolchain.sh [PREFIX])"
#
# Installs once into PREFIX (default: $FIRE_CUDA_HOME, else ~/.cache/fire-cuda/13.0) and prints
# on stdout the `export` lines to use it; everything else goes to stderr. A second run finds the
# finished prefix and only prints the exports. Needs python3 with pip, a C compiler (cc) and the
# network access to PyPI for the first run only (~675 MB of wheels, ~1.2 GB installed).
#
# Why these pins: candle 0.11 asks cudarc for the toolkit's version through `nvcc --version`
# (feature `cuda-version-from-build-system`), and cudarc 0.19 knows releases up to 13.4 only; the
# GPU machines we target run a 13.0 driver, and code built by a newer toolkit does not load there.
# So every wheel is the CUDA 13.0 (Update 2) release, pinned exactly for a reproducible build.
#
# Why a stub libcuda: candle enables cudarc's `dynamic-linking`, so the binary links
# -lcuda -lcudart -lnvrtc -lcurand -lcublas -lcublasLt. All but libcuda (which ships with the
# NVIDIA driver, not the toolkit) come from the wheels. The stub defines every driver entry point
# that cuda.h declares, has the soname `libcuda.so.1`, and lives in lib/stubs, which is only on
# LIBRARY_PATH (link time), never on LD_LIBRARY_PATH: at run time the driver's real libcuda.so.1
# is loaded, as with NVIDIA's own lib64/stubs.
set -euo pipefail

PINS=(
  nvidia-cuda-nvcc==13.0.88
  nvidia-cuda-crt==13.0.88
  nvidia-nvvm==13.0.88
  nvidia-cuda-runtime==13.0.96
  nvidia-cuda-cccl==13.0.85
  nvidia-cuda-nvrtc==13.0.88
  nvidia-cublas==13.0.2.14
  nvidia-curand==10.4.0.35
)
# Hopper (H100/H200); override for other GPUs, e.g. CUDA_COMPUTE_CAP=80 for A100.
COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"

prefix="${1:-${FIRE_CUDA_HOME:-$HOME/.cache/fire-cuda/13.0}}"
stamp="$prefix/.fire-cuda-toolchain"
wanted="$(printf '%s\n' "${PINS[@]}")"

log() { printf 'cuda-toolchain: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

print_env() {
  cat <<EOF
export CUDA_HOME="$prefix"
export CUDA_PATH="$prefix"
export CUDA_COMPUTE_CAP="$COMPUTE_CAP"
export PATH="$prefix/bin:\$PATH"
export LIBRARY_PATH="$prefix/lib:$prefix/lib/stubs\${LIBRARY_PATH:+:\$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$prefix/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
EOF
}

if [[ -f "$stamp" && "$(cat "$stamp")" == "$wanted" && -x "$prefix/bin/nvcc" ]]; then
  log "already installed in $prefix"
  print_env
  exit 0
fi

[[ "$(uname -s)/$(uname -m)" == "Linux/x86_64" ]] || die "the PyPI CUDA wheels used here are for Linux x86_64 only"
command -v python3 >/dev/null || die "python3 (with pip) is required"
command -v cc >/dev/null || die "a C compiler (cc) is required to build the libcuda stub"

if [[ -f "$stamp" ]]; then
  log "replacing the outdated toolkit in $prefix"
  rm -rf "$prefix"
elif [[ -e "$prefix" ]]; then
  # Never delete a directory this script did not make.
  die "$prefix exists and is not a toolkit installed by this script; remove it or pick another prefix"
fi
work="$prefix.partial.$$"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/wheels" "$work/tree"

log "downloading ${#PINS[@]} wheels from PyPI"
python3 -m pip download --quiet --disable-pip-version-check --no-cache-dir --no-deps \
  --only-binary=:all: --dest "$work/wheels" "${PINS[@]}" >&2

log "unpacking"
# zipfile drops the Unix mode bits; restore them so nvcc, ptxas, cicc... are executable.
python3 - "$work/wheels" "$work/tree" <<'PY'
import os, sys, zipfile
src, dst = sys.argv[1], sys.argv[2]
for name in sorted(os.listdir(src)):
    with zipfile.ZipFile(os.path.join(src, name)) as wheel:
        for info in wheel.infolist():
            path = wheel.extract(info, dst)
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                os.chmod(path, mode)
PY
cuda="$work/tree/nvidia/cu13"
[[ -f "$cuda/bin/nvcc" ]] || die "the nvcc wheel did not contain nvidia/cu13/bin/nvcc"
mkdir -p "$work/root"
mv "$cuda"/* "$work/root/"
root="$work/root"
# Older wheels lose the exec bit anyway; these must be runnable.
chmod +x "$root"/bin/* "$root"/nvvm/bin/* 2>/dev/null || true
rm -rf "$work/wheels" "$work/tree"

log "laying out a CUDA_HOME"
# nvcc.profile looks for $(TOP)/$(_TARGET_DIR_)/{include,lib64}; tools also expect lib64/.
ln -s lib "$root/lib64"
mkdir -p "$root/targets"
ln -s .. "$root/targets/x86_64-linux"
# The linker wants unversioned names (-lcudart -> libcudart.so).
for lib in "$root"/lib/lib*.so.*; do
  base="$(basename "$lib")"
  plain="${base%%.so.*}.so"
  [[ -e "$root/lib/$plain" ]] || ln -s "$base" "$root/lib/$plain"
done

log "building the link-time stub libcuda.so"
mkdir -p "$root/lib/stubs"
# Every driver entry point cuda.h declares, under both its public (_v2...) and internal names.
symbols="$(
  for internal in "" "-D__CUDA_API_VERSION_INTERNAL"; do
    cc -E -P $internal -I"$root/include" -x c "$root/include/cuda.h"
  done | tr '\n' ' ' | grep -oE '\bCUresult +cu[A-Za-z0-9_]+ *\(' | sed -E 's/^CUresult +//; s/ *\($//' | sort -u
)"
[[ "$(wc -l <<<"$symbols")" -gt 300 ]] || die "found too few driver symbols in cuda.h"
{
  echo '/* Link-time stub of the NVIDIA driver library; generated by cuda-toolchain.sh. */'
  echo '/* Never loaded at run time: the real libcuda.so.1 comes with the driver. */'
  while read -r sym; do echo "int $sym(void) { return 999; /* CUDA_ERROR_UNKNOWN */ }"; done <<<"$symbols"
} >"$root/lib/stubs/libcuda.c"
cc -shared -fPIC -O0 -Wl,-soname,libcuda.so.1 -o "$root/lib/stubs/libcuda.so" "$root/lib/stubs/libcuda.c"

version="$("$root/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')"
[[ "$version" == "13.0" ]] || die "nvcc reports release '$version', expected 13.0"

echo "$wanted" >"$root/.fire-cuda-toolchain"
mkdir -p "$(dirname "$prefix")"
mv "$root" "$prefix"
log "installed CUDA $version in $prefix ($(du -sh "$prefix" | cut -f1))"
print_env
