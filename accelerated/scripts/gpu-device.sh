#!/usr/bin/env bash
# The GPU check, device side: runs from a bundle made by gpu-bundle.sh on a machine that has an
# NVIDIA GPU, its driver, the CUDA 13.0 libraries and python3 — and no Rust toolchain, no pip,
# no network. Nothing is built, installed or downloaded here.
#
#   bash gpu-bundle/gpu-device.sh            (the copy inside the bundle: binaries and script match)
#
# Steps, each under its own timeout, all under one time budget; a failing step is recorded and
# the next one runs:
#   preflight   tools, the bundle's checksums, the CUDA libraries (named when missing), every
#               binary loads with all symbols bound (LD_BIND_NOW)
#   gpu         cuInit + cuDeviceGetCount through the driver's libcuda; without a device it stops
#               here with "no CUDA device" (exit 3) — the point the dry run (gpu-dry-run.sh) reaches
#   parity      the CUDA test binaries (FIRE bias, one forward pass, the fused kernel vs the CPU)
#   eval        the bundled CPU-trained checkpoint on CUDA (fused kernel; candle materialised
#               path) and on this machine's CPU, against the CPU numbers computed at bundle time
#   train       50 steps on CUDA (candle path), losses against the bundle's CPU training; the
#               trained checkpoint evaluated on CUDA and on CPU
#   timing      the CUDA fused kernel (FIRE, Alibi, NoPE) and PyTorch's SDPA without a bias (and
#               Appendix E's FIRE + SDPA where it fits) on the same GPU, N = 8 192 and 32 768
#
# Writes $OUT/results.json, $OUT/summary.txt and $OUT/device.log (OUT is the folder the device
# tool returns; default ./gpu-device-out). Exit: 0 all passed, 1 a step failed, 2 the preflight
# failed (nothing ran), 3 no CUDA device.
#
# Environment:
#   OUT                 where the three result files go
#   FIRE_GPU_BUDGET_S   total time budget in seconds (default 420; the device tool allows 600)
#   FIRE_CUDA_LIB_DIRS  extra library folders searched first (colon-separated); the dry run uses
#                       it to stand the PyPI toolkit and a stub driver in for the image's
#   FIRE_GPU_DEVICE     `cuda` (default); `cpu` tests this script's own plumbing without a GPU
#                       (gpu-dry-run.sh): no GPU probe, the fire-lm steps on the CPU, the CUDA
#                       test binaries fail as they must without a device
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
start_s=$SECONDS
budget_s="${FIRE_GPU_BUDGET_S:-420}"
gpu_dev="${FIRE_GPU_DEVICE:-cuda}"
[[ "$gpu_dev" == cuda || "$gpu_dev" == cpu ]] || { echo "gpu-device: FIRE_GPU_DEVICE must be cuda or cpu" >&2; exit 2; }
# Seconds kept back at the end for the summary.
reserve_s=10

# The bundle: this script's own folder when it is the bundle's copy, else the argument, else
# <repo>/gpu-bundle.
if [[ $# -ge 1 ]]; then
  bundle="$(cd "$1" && pwd)"
elif [[ -f "$here/bundle.env" ]]; then
  bundle="$here"
else
  bundle="$(cd "$here/../.." && pwd)/gpu-bundle"
fi

out="${OUT:-$PWD/gpu-device-out}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
# The device tool returns at most 8 files from $OUT: keep to three, everything else in $work.
: >"$out/device.log"
exec > >(tee -a "$out/device.log") 2>&1
tee_pid=$!

work="$(mktemp -d "${TMPDIR:-/tmp}/fire-gpu.XXXXXX")"
mkdir -p "$work/logs" "$work/data"
steps="$work/steps.jsonl"
: >"$steps"

log() { printf 'gpu-device: %s\n' "$*"; }

# Records one step's outcome: name, status (pass, fail, timeout, skipped), rc, seconds, detail.
record() {
  local name="$1" status="$2" rc="$3" secs="$4" detail="${5:-}"
  detail="${detail//\\/\\\\}"
  detail="${detail//\"/\\\"}"
  # One line of printable text: test output may hold tabs, newlines or escapes.
  detail="$(printf '%s' "$detail" | tr '\n\t' '  ' | tr -d '\000-\037\177')"
  printf '{"name":"%s","status":"%s","rc":%s,"seconds":%s,"detail":"%s"}\n' \
    "$name" "$status" "$rc" "$secs" "$detail" >>"$steps"
  status_of["$name"]="$status"
}
declare -A status_of=()

# Writes results.json and summary.txt from what is recorded so far (also after every step, so a
# run killed from outside still leaves its results). Needs python3, checked in the preflight.
summarise() {
  if [[ -n "${py:-}" ]]; then
    "$py" "$bundle/gpu-report.py" summary "$bundle" "$work" "$out" $((SECONDS - start_s)) "$@" \
      >/dev/null 2>&1 ||
      log "warning: could not write the summary"
  fi
}

finish() {
  local code="$1" verdict="$2"
  summarise --final "$verdict" "$code"
  [[ -f "$out/summary.txt" ]] && cat "$out/summary.txt"
  rm -rf "$work"
  # Let tee write the log's last lines before the device tool collects $OUT.
  exec >&- 2>&-
  wait "$tee_pid" 2>/dev/null || true
  exit "$code"
}

# step NAME MAX_SECONDS [--needs STEP]... -- CMD...: runs CMD with its output in the log, under
# min(MAX_SECONDS, what the budget has left); records the outcome and never stops the script.
step() {
  local name="$1" max="$2" need
  shift 2
  while [[ "$1" == --needs ]]; do
    need="$2"
    shift 2
    if [[ "${status_of[$need]:-}" != pass ]]; then
      log "skip $name: it needs $need, which did not pass"
      record "$name" skipped null 0 "needs $need (${status_of[$need]:-not run})"
      return 0
    fi
  done
  [[ "$1" == -- ]] && shift
  local left=$((budget_s - reserve_s - (SECONDS - start_s)))
  if ((left < 5)); then
    log "skip $name: the time budget (${budget_s} s) is spent"
    record "$name" skipped null 0 "time budget spent"
    return 0
  fi
  local limit=$((max < left ? max : left))
  printf '\n==> %s (at most %d s)\n' "$name" "$limit"
  local t0=$SECONDS rc=0
  # Live into device.log (a run cut short from outside keeps what the step printed); with
  # pipefail the status is the command's (tee's is 0).
  timeout -k 5 "$limit" "$@" 2>&1 | tee "$work/logs/$name.log" || rc=$?
  local secs=$((SECONDS - t0))
  local status=pass detail=""
  if ((rc == 124 || rc == 137)); then
    status=timeout
    detail="killed after $limit s"
  elif ((rc != 0)); then
    status=fail
    # The first panic (tests) or error (fire-lm) says most; else the last lines.
    detail="$(grep -m1 -A3 -E 'panicked at|^Error' "$work/logs/$name.log" || tail -n 3 "$work/logs/$name.log")"
  fi
  log "$name: $status (rc $rc, $secs s)"
  record "$name" "$status" "$rc" "$secs" "$detail"
  summarise
}

# ---------------------------------------------------------------------------------------------
printf '==> preflight (bundle %s, results in %s)\n' "$bundle" "$out"
preflight_errors=()
need_tool() {
  command -v "$1" >/dev/null 2>&1 || preflight_errors+=("missing tool: $1 ($2)")
}

[[ "$(uname -m)" == x86_64 ]] || preflight_errors+=("this is $(uname -m); the bundle is x86_64 code")
[[ -f "$bundle/bundle.env" ]] ||
  { log "error: no bundle at $bundle (make it with accelerated/scripts/gpu-bundle.sh)"; exit 2; }
# shellcheck source=/dev/null
source "$bundle/bundle.env"

# python3: the image's (it holds PyTorch); a plain one suffices for everything but the timing.
py="$(command -v python3 || true)"
for cand in /opt/torch/.venv/bin/python3 /usr/bin/python3; do
  [[ -n "$py" ]] && break
  [[ -x "$cand" ]] && py="$cand"
done
[[ -n "$py" ]] || preflight_errors+=("missing tool: python3 (comparisons, results file)")
need_tool timeout "per-step time limits (coreutils)"
need_tool sha256sum "bundle checksums (coreutils)"
if ((${#preflight_errors[@]})); then
  printf 'gpu-device: preflight failed:\n' >&2
  printf '  - %s\n' "${preflight_errors[@]}" >&2
  exit 2
fi

# The bundle as built: every file's checksum (a truncated carry would otherwise fail obscurely).
if ! (cd "$bundle" && sha256sum --quiet -c SHA256SUMS); then
  record preflight fail 2 0 "bundle checksums do not match (rebuild it with gpu-bundle.sh)"
  finish 2 "bundle corrupt"
fi
log "bundle: commit $BUNDLE_COMMIT, built $BUNDLE_BUILT_AT, CUDA_COMPUTE_CAP $BUNDLE_COMPUTE_CAP"

# The binaries travel as one xz tarball (the CUDA ones each embed candle's PTX: compressed
# together they take a fraction of the space). Unpack into the scratch folder.
# python3's tarfile where tar or xz is missing.
if command -v tar >/dev/null 2>&1 && command -v xz >/dev/null 2>&1; then
  timeout 120 tar -xJf "$bundle/$BUNDLE_ARCHIVE" -C "$work"
else
  timeout 120 "$py" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
    "$bundle/$BUNDLE_ARCHIVE" "$work"
fi
lm="$work/$BUNDLE_FIRE_LM"
read -r -a parity_tests <<<"$BUNDLE_PARITY_TESTS"
read -r -a timing_tests <<<"$BUNDLE_TIMING_TESTS"
binaries=("$lm")
for t in "${parity_tests[@]}" "${timing_tests[@]}"; do binaries+=("$work/$t"); done

# The CUDA libraries, by soname: the driver's libcuda.so.1 and the toolkit's (13.0) libraries.
# Search order: FIRE_CUDA_LIB_DIRS, LD_LIBRARY_PATH, the loader cache, the driver's and the
# toolkit's usual folders, then the CUDA wheels PyTorch brings (site-packages/nvidia/*).
ldconfig_bin="$(command -v ldconfig || true)"
for cand in /sbin/ldconfig /usr/sbin/ldconfig; do
  [[ -z "$ldconfig_bin" && -x "$cand" ]] && ldconfig_bin="$cand"
done
dirs=()
IFS=: read -r -a extra <<<"${FIRE_CUDA_LIB_DIRS:-}"
dirs+=("${extra[@]}")
IFS=: read -r -a extra <<<"${LD_LIBRARY_PATH:-}"
dirs+=("${extra[@]}")
if [[ -n "$ldconfig_bin" ]]; then
  while read -r path; do dirs+=("$(dirname "$path")"); done < <(
    "$ldconfig_bin" -p 2>/dev/null | sed -n 's/.*=> \(.*\)$/\1/p' |
      grep -E '/lib(cuda|cudart|cublas|cublasLt|curand|nvrtc)[.-]' || true
  )
fi
dirs+=(/usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64
  /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib)
for d in /usr/local/cuda-13*/lib64 /usr/local/cuda-13*/targets/x86_64-linux/lib; do dirs+=("$d"); done
while read -r sp; do
  for d in "$sp"/nvidia/cu13/lib "$sp"/nvidia/*/lib; do dirs+=("$d"); done
done < <("$py" -c 'import site; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null || true)

declare -A found=()
missing=()
lib_dirs=()
wanted_libs=()
for lib in $BUNDLE_CUDA_LIBS; do
  # NVRTC dlopens the builtins of its own release (libnvrtc.so.13.0.88 wants
  # libnvrtc-builtins.so.13.0): ask for the one matching the libnvrtc found, not the bundle's.
  if [[ "$lib" == libnvrtc-builtins.so.* && -n "${found[libnvrtc.so.13]:-}" ]]; then
    v="$(basename "$(readlink -f "${found[libnvrtc.so.13]}")" | sed -n 's/^libnvrtc\.so\.\([0-9]*\.[0-9]*\).*/\1/p')"
    [[ -n "$v" ]] && lib="libnvrtc-builtins.so.$v"
  fi
  wanted_libs+=("$lib")
  for d in "${dirs[@]}"; do
    # Never the link-time stub libcuda (lib/stubs, lib64/stubs): it fails every call.
    [[ -n "$d" && "$d" != */stubs && -e "$d/$lib" ]] || continue
    found[$lib]="$d/$lib"
    [[ " ${lib_dirs[*]} " == *" $d "* ]] || lib_dirs+=("$d")
    break
  done
  [[ -n "${found[$lib]:-}" ]] || missing+=("$lib")
done
for lib in "${wanted_libs[@]}"; do
  [[ -n "${found[$lib]:-}" ]] && log "found $lib: ${found[$lib]} -> $(readlink -f "${found[$lib]}")"
done
if ((${#missing[@]})); then
  log "error: CUDA libraries not found: ${missing[*]}"
  log "searched: $(printf '%s ' "${dirs[@]}" | tr -s ' ')"
  log "(set FIRE_CUDA_LIB_DIRS=/path/to/lib:... to point at them)"
  record preflight fail 2 $((SECONDS - start_s)) "CUDA libraries not found: ${missing[*]}"
  finish 2 "missing CUDA libraries: ${missing[*]}"
fi
LD_LIBRARY_PATH="$(IFS=:; echo "${lib_dirs[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
{
  for lib in "${wanted_libs[@]}"; do
    printf '%s\t%s\n' "$lib" "$(readlink -f "${found[$lib]}")"
  done
} >"$work/data/libraries.tsv"

# Every binary loads with every symbol bound now (not at first call): a missing library or
# symbol version shows here, named, before any GPU time is spent on it.
load_errors=()
for b in "${binaries[@]}"; do
  if command -v ldd >/dev/null 2>&1; then
    nf="$(ldd "$b" 2>&1 | grep 'not found' | tr -s ' \t' ' ' || true)"
    [[ -z "$nf" ]] || load_errors+=("$(basename "$b"): $nf")
  fi
  if [[ "$b" == "$lm" ]]; then probe=(--help); else probe=(--list); fi
  if ! err="$(LD_BIND_NOW=1 timeout 30 "$b" "${probe[@]}" 2>&1 >/dev/null)"; then
    load_errors+=("$(basename "$b") does not load: $(head -n 2 <<<"$err")")
  fi
done
if ((${#load_errors[@]})); then
  printf '  - %s\n' "${load_errors[@]}"
  record preflight fail 2 $((SECONDS - start_s)) "$(printf '%s; ' "${load_errors[@]}")"
  finish 2 "binaries do not load"
fi
log "all ${#binaries[@]} binaries load with every symbol bound"

if "$py" -c 'import importlib.util as u, sys; sys.exit(0 if u.find_spec("torch") else 1)'; then
  have_torch=1
else
  have_torch=0
  log "warning: $py has no torch: the PyTorch SDPA timing will be skipped"
fi
record preflight pass 0 $((SECONDS - start_s)) "libraries in: ${lib_dirs[*]}; torch: $have_torch"

# ---------------------------------------------------------------------------------------------
printf '\n==> gpu\n'
command -v nvidia-smi >/dev/null 2>&1 &&
  timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader \
    >"$work/data/nvidia-smi.txt" 2>&1 || true
[[ -s "$work/data/nvidia-smi.txt" ]] && cat "$work/data/nvidia-smi.txt"
rc=0
if [[ "$gpu_dev" == cpu ]]; then
  log "FIRE_GPU_DEVICE=cpu: a test of this script's plumbing; the GPU steps run on the CPU"
  record gpu skipped null 0 "FIRE_GPU_DEVICE=cpu (plumbing test)"
else
  timeout 60 "$py" "$bundle/gpu-report.py" probe "${found[libcuda.so.1]}" "$work/data/gpu.json" || rc=$?
  if ((rc != 0)); then
    record gpu fail "$rc" 0 "no CUDA device"
    log "no CUDA device: stopping before the GPU steps (everything before this point is ready)"
    finish 3 "no CUDA device"
  fi
  record gpu pass 0 0 ""
fi

# The driver compiles candle's PTX (sm_90) at first load; keep its cache for the later
# processes of this run.
export CUDA_CACHE_PATH="$work/nv-cache" CUDA_CACHE_MAXSIZE=$((2 << 30))
export RUST_BACKTRACE=1
ckpt="$work/cpu-run"
cp -r "$bundle/expected/cpu-run" "$ckpt"
read -r -a train_args <<<"$BUNDLE_TRAIN_ARGS"
read -r -a eval_args <<<"$BUNDLE_EVAL_ARGS"
report=("$py" "$bundle/gpu-report.py")

# The parity tests: FIRE's bias, one forward pass and the fused kernel, CUDA vs CPU.
for t in "${parity_tests[@]}"; do
  step "test-$(basename "$t")" 150 -- env FIRE_PARITY_RUN="$ckpt" \
    "$work/$t" --ignored --nocapture --test-threads=1
done

# The bundle's CPU-trained checkpoint, evaluated here on CUDA (both attention paths) and on the
# CPU, against the CPU build's numbers from bundle time.
for mode in fused materialised; do
  step "eval-cuda-$mode" 90 -- "$lm" eval "$ckpt" "${eval_args[@]}" --attention "$mode" \
    --device "$gpu_dev" --out "$work/eval-cuda-$mode"
  step "check-eval-cuda-$mode" 20 --needs "eval-cuda-$mode" -- "${report[@]}" check-eval \
    "$work/eval-cuda-$mode/eval.json" "$bundle/expected/eval-cpu.json" 1e-3 \
    "$work/data/check-eval-cuda-$mode.json"
done
step eval-cpu-here 90 -- "$lm" eval "$ckpt" "${eval_args[@]}" --device cpu --out "$work/eval-cpu-here"
step check-eval-cpu-here 20 --needs eval-cpu-here -- "${report[@]}" check-eval \
  "$work/eval-cpu-here/eval.json" "$bundle/expected/eval-cpu.json" 1e-5 \
  "$work/data/check-eval-cpu-here.json"

# 50 steps of training on CUDA (the candle path), the same flags as the bundle's CPU run.
step train-cuda 150 -- "$lm" train --run "$work/cuda-run" "${train_args[@]}" --device "$gpu_dev"
step check-train-cuda 20 --needs train-cuda -- "${report[@]}" check-train \
  "$work/cuda-run/metrics.jsonl" "$bundle/expected/cpu-run/metrics.jsonl" \
  "$work/data/check-train-cuda.json"
step eval-trained-cuda 90 --needs train-cuda -- "$lm" eval "$work/cuda-run" "${eval_args[@]}" \
  --device "$gpu_dev" --out "$work/eval-trained-cuda"
step eval-trained-cpu 90 --needs train-cuda -- "$lm" eval "$work/cuda-run" "${eval_args[@]}" \
  --device cpu --out "$work/eval-trained-cpu"
step check-eval-trained 20 --needs eval-trained-cuda --needs eval-trained-cpu -- "${report[@]}" \
  check-eval "$work/eval-trained-cuda/eval.json" "$work/eval-trained-cpu/eval.json" 1e-3 \
  "$work/data/check-eval-trained.json"

# Timing on the same GPU: PyTorch's SDPA without a bias (predictable, first), then our fused
# kernel. Both print each measurement as it is made, so a step cut short keeps what it has.
if ((have_torch)); then
  step timing-torch 120 -- env PYTHONUNBUFFERED=1 "$py" "$bundle/gpu-torch-sdpa.py" \
    --lengths "$BUNDLE_TIMING_LENGTHS" --repeats 3 --fire-module "$bundle/torch_fire.py"
else
  record timing-torch skipped null 0 "no torch in $py"
fi
for t in "${timing_tests[@]}"; do
  step "timing-$(basename "$t")" 180 -- env FIRE_TIMING_LENGTHS="$BUNDLE_TIMING_LENGTHS" \
    FIRE_TIMING_REPEATS=3 "$work/$t" --ignored --nocapture --test-threads=1
done

failed=0
while read -r s; do
  [[ "$s" == pass || "$s" == skipped ]] || failed=1
done < <(printf '%s\n' "${status_of[@]}")
plumbing=""
[[ "$gpu_dev" == cuda ]] || plumbing=" (FIRE_GPU_DEVICE=$gpu_dev: a plumbing test, not a GPU check)"
if ((failed)); then finish 1 "some steps failed$plumbing"; else finish 0 "all steps passed$plumbing"; fi
