#!/usr/bin/env bash
# Builds, on a machine without a GPU, everything the GPU check needs on a machine that has a GPU
# but no Rust toolchain and no network (the device tool's: x86-64, one H200, CUDA 13.0 driver and
# toolkit, PyTorch; only the working tree and <= 64 MiB of carried ignored files travel):
#
#   accelerated/scripts/gpu-bundle.sh          -> <repo>/gpu-bundle/ (git-ignored), <= 60 MiB
#   accelerated/scripts/gpu-bundle.sh --refresh-scripts
#       only copies the device-side scripts into an existing bundle again (after a change to
#       gpu-device.sh, gpu-report.py or gpu-torch-sdpa.py; seconds instead of a build)
#
# 1. `--features cuda` release builds with the pinned PyPI CUDA 13.0 toolkit and its stub libcuda
#    (cuda-toolchain.sh): `fire-lm` and every integration test that touches CUDA, found by
#    `cargo metadata` (a test of a package with a `cuda` feature whose source calls
#    `Device::new_cuda`), their executables read from cargo's JSON messages, never from paths.
#    A test that prints `TIMING {json}` lines is a timing test, the others parity tests.
# 2. The CPU build's `fire-lm` (default features) computes the expected results here: 50 steps
#    of CPU training (the candle path, as CUDA training takes), that checkpoint's evaluation,
#    and, as a yardstick, how far the CPU's fused training path drifts from it.
# 3. Strips the CUDA binaries, checks their NEEDED sonames and RPATH/RUNPATH (the CUDA
#    libraries by soname, no path into the PyPI prefix), packs them into one .tar.xz (they share
#    candle's embedded PTX, which compresses away across files), adds the device-side scripts,
#    a manifest, a sourceable bundle.env and SHA256SUMS; refuses a bundle over 60 MiB.
# 4. Prints the bundle's size, the build time and the device tool call to run it.
#
# Environment:
#   FIRE_GPU_BUNDLE       bundle folder (default <repo>/gpu-bundle; the device tool sends the
#                         session's own checkout, so build it there and carry it by this path)
#   FIRE_CUDA_HOME        toolkit prefix (default ~/.cache/fire-cuda/13.0, outside the repo)
#   FIRE_CUDA_TARGET_DIR  cargo target dir of the CUDA build (default <repo>/target-cuda)
#   FIRE_CPU_TARGET_DIR   cargo target dir of the CPU build (default <repo>/target)
#   CUDA_COMPUTE_CAP      GPU architecture of candle's kernels (default 90: H100/H200)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$repo"
start_s=$SECONDS

bundle="${FIRE_GPU_BUNDLE:-$repo/gpu-bundle}"
prefix="${FIRE_CUDA_HOME:-$HOME/.cache/fire-cuda/13.0}"
cuda_target="${FIRE_CUDA_TARGET_DIR:-$repo/target-cuda}"
cpu_target="${FIRE_CPU_TARGET_DIR:-$repo/target}"
limit_mib=60
# The device tool's limit on everything that travels: the working tree plus carried paths.
travel_limit_mib=64

# What the device runs, fixed here so that the CPU numbers are computed with the same flags.
# `--attention materialised`: CUDA training takes the candle path whatever is asked; say so on
# both devices. (gpu-check.sh used the same model and schedule.)
train_args="--encoding fire --fire-l-init 16 --seq-len 64 --batch 8 --steps 50 --warmup 5 --seed 0 --checkpoint-every 50 --quiet --attention materialised"
eval_args="--lengths 64,128,256 --max-windows 4"
timing_lengths="8192,32768"

log() { printf 'gpu-bundle: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# The device-side scripts travel inside the bundle, so they always match its binaries.
copy_scripts() {
  local to="$1" f torch_fire
  for f in gpu-device.sh gpu-report.py gpu-torch-sdpa.py; do cp "$here/$f" "$to/$f"; done
  chmod +x "$to/gpu-device.sh"
  # Appendix E's PyTorch module, wherever the tree keeps it (for the PyTorch FIRE timing row).
  torch_fire="$(git ls-files -- '*torch_fire.py' | head -1)"
  if [[ -n "$torch_fire" ]]; then
    cp "$torch_fire" "$to/torch_fire.py"
  else
    log "warning: no torch_fire.py in the tree: the PyTorch timing will skip Appendix E's FIRE"
  fi
}
checksum() {
  (cd "$1" && find . -type f ! -name 'SHA256SUMS*' -printf '%P\n' | LC_ALL=C sort | xargs sha256sum) >"$1/SHA256SUMS.new"
  mv "$1/SHA256SUMS.new" "$1/SHA256SUMS"
}

if [[ "${1:-}" == --refresh-scripts ]]; then
  [[ -f "$bundle/bundle.env" ]] || die "no bundle at $bundle to refresh"
  copy_scripts "$bundle"
  checksum "$bundle"
  log "refreshed the scripts in $bundle (binaries and expected results unchanged: commit $(sed -n 's/^BUNDLE_COMMIT=//p' "$bundle/bundle.env"))"
  exit 0
fi
phase_s=$SECONDS
phase() { log "$1 ($((SECONDS - phase_s)) s)"; phase_s=$SECONDS; }

[[ "$(uname -s)/$(uname -m)" == Linux/x86_64 ]] || die "the bundle is x86_64 Linux code; build it on such a machine"
for tool in cargo python3 readelf strip tar xz sha256sum git; do
  command -v "$tool" >/dev/null || die "$tool is required"
done

stage="$bundle.partial.$$"
scratch="$(mktemp -d)"
trap 'rm -rf "$stage" "$scratch"' EXIT
mkdir -p "$stage/bin/tests" "$stage/expected"

# --- 1. the CUDA build ------------------------------------------------------------------------
eval "$("$here/cuda-toolchain.sh" "$prefix")"
log "toolkit: $(nvcc --version | tail -1) in $CUDA_HOME, CUDA_COMPUTE_CAP=$CUDA_COMPUTE_CAP"

# The CUDA tests, by what they are rather than where they live (the source tree is moving).
cargo metadata --no-deps --format-version 1 --locked >"$scratch/metadata.json"
python3 - "$scratch/metadata.json" >"$scratch/tests.tsv" <<'PY'
import json, sys
meta = json.load(open(sys.argv[1]))
members = set(meta["workspace_members"])
for pkg in meta["packages"]:
    if pkg["id"] not in members or "cuda" not in pkg["features"]:
        continue
    for t in pkg["targets"]:
        if t["kind"] != ["test"]:
            continue
        src = open(t["src_path"], errors="replace").read()
        if "new_cuda" not in src:
            continue
        role = "timing" if "TIMING {" in src else "parity"
        print(f"{pkg['name']}\t{t['name']}\t{role}")
PY
[[ -s "$scratch/tests.tsv" ]] || die "found no CUDA tests (a test calling Device::new_cuda in a package with a cuda feature)"
grep -q $'\tparity$' "$scratch/tests.tsv" || die "found no CUDA parity test"
cargo_args=()
features=()
while IFS=$'\t' read -r pkg test role; do
  [[ " ${cargo_args[*]} " == *" -p $pkg "* ]] || { cargo_args+=(-p "$pkg"); features+=("$pkg/cuda"); }
  cargo_args+=(--test "$test")
  log "CUDA test: $pkg/$test ($role)"
done <"$scratch/tests.tsv"
[[ " ${cargo_args[*]} " == *" -p fire-accelerated "* ]] ||
  { cargo_args+=(-p fire-accelerated); features+=(fire-accelerated/cuda); }

# Release profile for all: one build of candle serves fire-lm and the tests, and the timing test
# measures optimised host code. No debug info (the binaries are stripped anyway; it makes the
# link faster). An integration test makes cargo build the package's binaries too: fire-lm comes
# out of the same command.
export CARGO_TERM_COLOR=never CARGO_PROFILE_RELEASE_DEBUG=false
export CUDAFORGE_THREADS="${CUDAFORGE_THREADS:-$(nproc)}"
log "cargo test --release --no-run --features ${features[*]} (target dir $cuda_target)"
CARGO_TARGET_DIR="$cuda_target" nice -n 19 cargo test --release --no-run --locked \
  "${cargo_args[@]}" --features "$(IFS=,; echo "${features[*]}")" \
  --message-format=json-render-diagnostics >"$scratch/cuda-build.json"
cuda_build_s=$((SECONDS - phase_s))
phase "CUDA build done"

# Executables from cargo's messages: fire-lm (a plain bin) and the tests (test harnesses).
python3 - "$scratch/cuda-build.json" "$scratch/tests.tsv" >"$scratch/cuda-exes.tsv" <<'PY'
import json, sys
wanted = {line.split("\t")[1]: line.split("\t")[2].strip() for line in open(sys.argv[2])}
found = {}
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    t = m["target"]
    if t["kind"] == ["bin"] and t["name"] == "fire-lm" and not m["profile"]["test"]:
        found["fire-lm"] = ("bin", m["executable"])
    elif t["kind"] == ["test"] and t["name"] in wanted:
        found[t["name"]] = (wanted[t["name"]], m["executable"])
missing = ({"fire-lm"} | set(wanted)) - set(found)
if missing:
    sys.exit(f"cargo reported no executable for: {', '.join(sorted(missing))}")
for name, (role, exe) in sorted(found.items()):
    print(f"{name}\t{role}\t{exe}")
PY

# --- 2. the CPU build and the expected results --------------------------------------------------
log "cargo build --release -p fire-accelerated --bin fire-lm (CPU, target dir $cpu_target)"
(
  unset CARGO_PROFILE_RELEASE_DEBUG
  CARGO_TARGET_DIR="$cpu_target" nice -n 19 cargo build --release --locked -p fire-accelerated \
    --bin fire-lm --message-format=json-render-diagnostics
) >"$scratch/cpu-build.json"
cpu_lm="$(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "fire-lm" and m.get("executable"):
        print(m["executable"])' "$scratch/cpu-build.json" | tail -1)"
[[ -x "$cpu_lm" ]] || die "cargo reported no CPU fire-lm executable"
cpu_build_s=$((SECONDS - phase_s))
phase "CPU build done"

read -r -a targs <<<"$train_args"
read -r -a eargs <<<"$eval_args"
# The reference: CPU training on the candle path, then its evaluation with the fused kernel
# (the device compares CUDA's fused and materialised paths and its own CPU to these numbers).
"$cpu_lm" train --run "$stage/expected/cpu-run" "${targs[@]}" --device cpu
"$cpu_lm" eval "$stage/expected/cpu-run" "${eargs[@]}" --device cpu --out "$scratch/eval-cpu"
cp "$scratch/eval-cpu/eval.json" "$stage/expected/eval-cpu.json"
# A yardstick for the CUDA-vs-CPU loss tolerance: the same run through the CPU's fused op.
"$cpu_lm" train --run "$scratch/cpu-run-fused" "${targs[@]/materialised/fused}" --device cpu
train_spread="$(python3 - "$stage/expected/cpu-run/metrics.jsonl" "$scratch/cpu-run-fused/metrics.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p) if '"loss"' in l] for p in sys.argv[1:])
assert len(a) == len(b) > 0, (a, b)
print(f"{max(abs(x - y) for x, y in zip(a, b)):.3e}")
PY
)"
log "CPU training: fused vs materialised losses differ by at most $train_spread"
# The checkpoint must not point back into this machine (eval reads the corpus path it records:
# none here, the corpus is embedded in the binary).
if grep -rIl -e "$repo" -e "$HOME" "$stage/expected" >/dev/null 2>&1; then
  die "the expected results mention paths of this machine: $(grep -rIl -e "$repo" -e "$HOME" "$stage/expected" | head -3)"
fi
expected_s=$((SECONDS - phase_s))
phase "expected CPU results done"

# --- 3. strip, check, pack ---------------------------------------------------------------------
cuda_libs=()
add_lib() { [[ " ${cuda_libs[*]} " == *" $1 "* ]] || cuda_libs+=("$1"); }
is_cuda_lib() { [[ "$1" =~ ^lib(cuda|cudart|cublas|cublasLt|curand|nvrtc|cufft|cusparse|cusolver|cudnn|nvJitLink)[.] ]]; }
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
raw_bytes=0
fire_lm_rel=bin/fire-lm
parity=()
timing=()
while IFS=$'\t' read -r name role exe; do
  if [[ "$role" == bin ]]; then rel="$fire_lm_rel"; else rel="bin/tests/$name"; fi
  cp "$exe" "$stage/$rel"
  raw_bytes=$((raw_bytes + $(stat -c %s "$exe")))
  # --strip-debug keeps the symbol table: a failure on the device (one try, no debugger) shows
  # function names in its backtrace, for ~0.5 MiB of the packed bundle (--strip-all: 7.9 MiB).
  strip --strip-debug "$stage/$rel"
  case "$role" in parity) parity+=("$rel") ;; timing) timing+=("$rel") ;; esac
  # A run path into the PyPI prefix (or anywhere) would let this machine's layout leak into
  # the device's library search; the loader must find the image's libraries by soname.
  rpath="$(readelf -d "$stage/$rel" | grep -E '\((RPATH|RUNPATH)\)' || true)"
  [[ -z "$rpath" ]] || die "$name has a run path: $rpath"
  while read -r so; do
    [[ "$so" != */* ]] || die "$name needs a library by path: $so"
    [[ "$so" != *stub* ]] || die "$name needs a stub library: $so"
    if is_cuda_lib "$so"; then add_lib "$so"; fi
  done < <(needed "$stage/$rel")
done <"$scratch/cuda-exes.tsv"
for lib in libcuda.so.1 libcudart.so.13 libnvrtc.so.13; do
  [[ " ${cuda_libs[*]} " == *" $lib "* ]] || die "fire-lm does not link $lib (NEEDED: ${cuda_libs[*]})"
done
# What those libraries need in turn (cuBLAS needs cuBLASLt), and NVRTC's builtins, which it
# dlopens at run time by this exact name.
for so in "${cuda_libs[@]}"; do
  [[ "$so" == libcuda.so.1 ]] && continue
  [[ -e "$CUDA_HOME/lib/$so" ]] || die "$so is not in the toolkit at $CUDA_HOME/lib"
  while read -r dep; do if is_cuda_lib "$dep"; then add_lib "$dep"; fi; done < <(needed "$CUDA_HOME/lib/$so")
done
builtins=("$CUDA_HOME"/lib/libnvrtc-builtins.so.*.*)
[[ -e "${builtins[0]}" ]] || die "no libnvrtc-builtins in $CUDA_HOME/lib"
add_lib "$(readelf -d "${builtins[0]}" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')"
glibc="$(for f in "$stage"/bin/fire-lm "$stage"/bin/tests/*; do readelf -V "$f"; done |
  grep -oE 'GLIBC_[0-9.]+' | sort -uV | tail -1)"
log "CUDA libraries the device must provide: ${cuda_libs[*]}; newest glibc symbol: $glibc"

# xz -9: a 64 MiB dictionary, so each binary's copy of candle's PTX is stored once.
stripped_bytes="$(du -cb "$stage"/bin/fire-lm "$stage"/bin/tests/* | tail -1 | cut -f1)"
archive=bin.tar.xz
XZ_OPT=-9 tar -cJf "$stage/$archive" -C "$stage" bin
rm -rf "${stage:?}/bin"
pack_s=$((SECONDS - phase_s))
phase "binaries packed: $((raw_bytes >> 20)) MiB built, $((stripped_bytes >> 20)) MiB stripped, $(($(stat -c %s "$stage/$archive") >> 20)) MiB packed"

copy_scripts "$stage"

commit="$(git rev-parse HEAD)"
dirty=false
[[ -z "$(git status --porcelain --untracked-files=no)" ]] || dirty=true
built_at="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
cat >"$stage/bundle.env" <<EOF
# Written by accelerated/scripts/gpu-bundle.sh; read by gpu-device.sh.
BUNDLE_COMMIT=$commit
BUNDLE_DIRTY=$dirty
BUNDLE_BUILT_AT=$built_at
BUNDLE_COMPUTE_CAP=$CUDA_COMPUTE_CAP
BUNDLE_ARCHIVE=$archive
BUNDLE_FIRE_LM=$fire_lm_rel
BUNDLE_PARITY_TESTS="${parity[*]}"
BUNDLE_TIMING_TESTS="${timing[*]}"
BUNDLE_CUDA_LIBS="${cuda_libs[*]}"
BUNDLE_TRAIN_ARGS="$train_args"
BUNDLE_EVAL_ARGS="$eval_args"
BUNDLE_TIMING_LENGTHS=$timing_lengths
EOF
python3 - "$stage/MANIFEST.json" <<PY
import json, sys
json.dump({
    "commit": "$commit", "dirty": $([[ $dirty == true ]] && echo True || echo False),
    "built_at": "$built_at",
    "toolkit": "$(nvcc --version | tail -1)", "compute_cap": "$CUDA_COMPUTE_CAP",
    "binaries": {"fire-lm": "$fire_lm_rel", "parity_tests": "${parity[*]}".split(),
                 "timing_tests": "${timing[*]}".split(), "archive": "$archive",
                 "built_bytes": $raw_bytes, "stripped_bytes": $stripped_bytes,
                 "newest_glibc_symbol": "$glibc"},
    "cuda_libraries": "${cuda_libs[*]}".split(),
    "train_args": "$train_args", "eval_args": "$eval_args",
    "timing_lengths": "$timing_lengths", "train_spread": float("$train_spread"),
    "expected": {"cpu_run": "expected/cpu-run", "eval_cpu": "expected/eval-cpu.json"},
}, open(sys.argv[1], "w"), indent=1)
PY
checksum "$stage"

bytes="$(du -sb "$stage" | cut -f1)"
((bytes <= limit_mib << 20)) || die "the bundle is $((bytes >> 20)) MiB, over the $limit_mib MiB limit"
rm -rf "$bundle"
mv "$stage" "$bundle"

# Everything that travels: tracked and untracked-not-ignored files, plus the bundle.
tree_bytes="$(git ls-files -co --exclude-standard -z | xargs -0 -r du -cb 2>/dev/null | awk '/\ttotal$/ {s += $1} END {print s + 0}')"
travel=$((tree_bytes + bytes))
((travel <= travel_limit_mib << 20)) ||
  log "warning: tree + bundle = $((travel >> 20)) MiB, over the device tool's $travel_limit_mib MiB"

rel="${bundle#"$repo"/}"
mib() { python3 -c "print(f'{$1 / 2**20:.1f}')"; }
log "ok: $rel is $(mib "$bytes") MiB (working tree $(mib "$tree_bytes") MiB; $(mib "$travel") of $travel_limit_mib MiB travel)"
log "time: $((SECONDS - start_s)) s in all (CUDA build ${cuda_build_s} s, CPU build ${cpu_build_s} s, expected results ${expected_s} s, strip+pack ${pack_s} s)"
cat <<EOF

The device check (one call of the device tool's run, from the checkout that holds $rel):
  command:   bash $rel/gpu-device.sh
  carry:     ["$rel"]
  timeout_s: 480
Results come back as results.json, summary.txt and device.log. Prove it here first, without a
GPU, cargo or network: accelerated/scripts/gpu-dry-run.sh
EOF
