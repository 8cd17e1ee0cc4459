#!/usr/bin/env bash
# The GPU check's dry run, here, without a GPU: runs the device command exactly as the device
# tool would (the same command line, from the root of a fresh copy of the working tree holding
# the bundle), with cargo, rustup and the network taken away, and proves that the device-side
# script needs nothing but the bundle and the machine: it must get through the whole preflight
# (tools, checksums, unpacking, the CUDA libraries, every binary loading with all symbols bound)
# and stop at the GPU with "no CUDA device" (exit 3) — not earlier.
#
#   accelerated/scripts/gpu-dry-run.sh          (after gpu-bundle.sh)
#
# Stand-ins for what only the device has: the image's CUDA 13.0 libraries are the PyPI toolkit's
# (cuda-toolchain.sh), named through FIRE_CUDA_LIB_DIRS as a user could on the device; the
# driver's libcuda.so.1 is the toolkit's link-time stub (every entry point returns 999, so
# cuInit fails as it does with no GPU). The environment is `env -i PATH=/usr/bin:/bin` with a
# fresh HOME and no proxy variables, in a new network namespace (`unshare --net`: no network at
# all) where this machine allows it. A second run without the toolkit's folder must stop in the
# preflight naming the missing libraries. A third (FIRE_GPU_DEVICE=cpu) runs every later step
# with fire-lm on the CPU, to prove the steps, comparisons and results file work: the eval and
# training steps and their checks must pass against the bundle's numbers, and the CUDA test
# binaries must fail (there is no device), be recorded, and not stop the run. A fourth stands in
# a driver that claims one device and fails every other call: each CUDA step must fail with its
# error recorded, the steps that need them be skipped, and the run reach its end. About a minute.
#
# Environment: FIRE_GPU_BUNDLE (default <repo>/gpu-bundle), FIRE_CUDA_HOME (the toolkit prefix).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$repo"
bundle="${FIRE_GPU_BUNDLE:-$repo/gpu-bundle}"
prefix="${FIRE_CUDA_HOME:-$HOME/.cache/fire-cuda/13.0}"

log() { printf 'gpu-dry-run: %s\n' "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }

[[ -f "$bundle/bundle.env" ]] || die "no bundle at $bundle: run accelerated/scripts/gpu-bundle.sh first"
[[ -f "$prefix/lib/stubs/libcuda.so" ]] || die "no toolkit with a stub libcuda at $prefix (cuda-toolchain.sh)"
rel="${bundle#"$repo"/}"
[[ "$rel" != /* ]] || die "the bundle $bundle is not inside the repository"
# The device command, as gpu-bundle.sh prints it.
command="bash $rel/gpu-device.sh"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/driver" "$tmp/home" "$tmp/tmp" "$tmp/tree"
ln -s "$prefix/lib/stubs/libcuda.so" "$tmp/driver/libcuda.so.1"

# What the device tool sends: tracked and untracked-not-ignored files, plus the carried bundle.
git ls-files -co --exclude-standard -z | xargs -0 cp -P --parents -t "$tmp/tree"
mkdir -p "$tmp/tree/$(dirname "$rel")"
cp -r "$bundle" "$tmp/tree/$rel"

clean_path=/usr/bin:/bin
if env -i PATH="$clean_path" bash -c 'command -v cargo || command -v rustc || command -v rustup'; then
  die "cargo or rustc is on $clean_path: this is no test of a machine without a toolchain"
fi
isolate=()
if unshare --net true 2>/dev/null; then
  isolate=(unshare --net)
  log "network: none (a new network namespace)"
else
  log "network: unshare --net is not allowed here; relying on env -i (no proxy variables)"
fi

# run NAME LIB_DIRS [VAR=VALUE...]: the device command in the clean environment; output in
# $tmp/NAME.txt, results in $tmp/out-NAME.
run() {
  local name="$1" libs="$2" rc=0
  shift 2
  mkdir -p "$tmp/out-$name"
  (cd "$tmp/tree" && "${isolate[@]}" env -i PATH="$clean_path" HOME="$tmp/home" \
    TMPDIR="$tmp/tmp" OUT="$tmp/out-$name" FIRE_CUDA_LIB_DIRS="$libs" "$@" \
    bash -c "$command") >"$tmp/$name.txt" 2>&1 || rc=$?
  echo "$rc"
}

log "running '$command' with the toolkit's libraries and the stub driver"
rc="$(run full "$tmp/driver:$prefix/lib")"
tail -n 25 "$tmp/full.txt"
[[ "$rc" == 3 ]] || die "expected exit 3 (no CUDA device), got $rc"
grep -q 'no CUDA device' "$tmp/full.txt" || die "the output does not say 'no CUDA device'"
python3 - "$tmp/out-full/results.json" <<'PY' || die "results.json does not show a passed preflight and a missing GPU"
import json, sys
r = json.load(open(sys.argv[1]))
steps = {s["name"]: s for s in r["steps"]}
assert list(steps) == ["preflight", "gpu"], list(steps)
assert steps["preflight"]["status"] == "pass", steps["preflight"]
assert steps["gpu"]["status"] == "fail" and "no CUDA device" in steps["gpu"]["detail"], steps["gpu"]
assert r["exit_code"] == 3 and len(r["libraries"]) >= 6, r
PY
for f in results.json summary.txt device.log; do
  [[ -s "$tmp/out-full/$f" ]] || die "\$OUT/$f is missing"
done

log "running it again without the toolkit's libraries: it must name what is missing"
rc="$(run missing "$tmp/driver")"
grep 'not found\|error' "$tmp/missing.txt" | head -n 3 >&2
[[ "$rc" == 2 ]] || die "expected exit 2 (preflight failed), got $rc; output: $(tail -n 5 "$tmp/missing.txt")"
grep -q 'CUDA libraries not found: .*libcudart.so.13' "$tmp/missing.txt" ||
  die "the preflight did not name the missing libraries"

log "running it with FIRE_GPU_DEVICE=cpu: every step after the GPU probe, fire-lm on the CPU"
rc="$(run plumbing "$tmp/driver:$prefix/lib" FIRE_GPU_DEVICE=cpu)"
sed -n '/^step  /,$p' "$tmp/out-plumbing/summary.txt" >&2
[[ "$rc" == 1 ]] || die "expected exit 1 (the CUDA tests fail without a device), got $rc"
python3 - "$tmp/out-plumbing/results.json" <<'PY' || die "the plumbing run's results are not as expected"
import json, sys
r = json.load(open(sys.argv[1]))
status = {s["name"]: s["status"] for s in r["steps"]}
must_pass = ["preflight", "eval-cuda-fused", "check-eval-cuda-fused", "eval-cuda-materialised",
             "check-eval-cuda-materialised", "eval-cpu-here", "check-eval-cpu-here", "train-cuda",
             "check-train-cuda", "eval-trained-cuda", "eval-trained-cpu", "check-eval-trained"]
bad = {k: status.get(k) for k in must_pass if status.get(k) != "pass"}
assert not bad, f"steps that should pass: {bad}"
tests = [k for k in status if k.startswith(("test-", "timing-cuda"))]
assert tests and all(status[k] == "fail" for k in tests), {k: status[k] for k in tests}
# The CPU against the bundle's CPU numbers: the same code, so (next to) no difference at all.
for c in ["check-eval-cuda-fused", "check-eval-cpu-here", "check-train-cuda"]:
    assert r["checks"][c]["worst_abs_diff"] <= 1e-6, (c, r["checks"][c]["worst_abs_diff"])
PY

log "running it with a driver that claims a device and fails everything else"
# The stub's source with the probe's entry points answering "one device".
grep -vE 'int (cuInit|cuDeviceGetCount|cuDriverGetVersion|cuDeviceGet|cuDeviceGetName|cuDeviceTotalMem_v2|cuDeviceGetAttribute)\(void\)' \
  "$prefix/lib/stubs/libcuda.c" >"$tmp/fake.c"
cat >>"$tmp/fake.c" <<'C'
int cuInit(unsigned flags) { (void)flags; return 0; }
int cuDeviceGetCount(int *n) { *n = 1; return 0; }
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
int cuDeviceGet(int *d, int i) { (void)i; *d = 0; return 0; }
int cuDeviceGetName(char *s, int len, int d) {
  const char *n = "Fake GPU"; int i = 0; (void)d;
  for (; n[i] && i < len - 1; i++) s[i] = n[i];
  s[i] = 0; return 0;
}
int cuDeviceTotalMem_v2(unsigned long *m, int d) { (void)d; *m = 1UL << 30; return 0; }
int cuDeviceGetAttribute(int *v, int a, int d) { (void)d; *v = a == 75 ? 9 : 0; return 0; }
C
mkdir -p "$tmp/fake-driver"
cc -shared -fPIC -w -Wl,-soname,libcuda.so.1 -o "$tmp/fake-driver/libcuda.so.1" "$tmp/fake.c"
rc="$(run fake "$tmp/fake-driver:$prefix/lib")"
sed -n '/^step  /,/^$/p' "$tmp/out-fake/summary.txt" >&2
[[ "$rc" == 1 ]] || die "expected exit 1 (every CUDA step fails), got $rc"
python3 - "$tmp/out-fake/results.json" <<'PY' || die "the fake-device run's results are not as expected"
import json, sys
r = json.load(open(sys.argv[1]))
status = {s["name"]: s for s in r["steps"]}
assert status["gpu"]["status"] == "pass" and r["gpu"]["devices"][0]["name"] == "Fake GPU", r["gpu"]
for k in ["eval-cuda-fused", "eval-cuda-materialised", "train-cuda"]:
    assert status[k]["status"] == "fail" and "CUDA" in status[k]["detail"], status[k]
assert status["check-train-cuda"]["status"] == "skipped", status["check-train-cuda"]
assert status["eval-cpu-here"]["status"] == "pass", status["eval-cpu-here"]
assert any(k.startswith("timing-cuda") for k in status), "the run did not reach the timing"
PY

log "ok: the device command needs no cargo and no network, finds every CUDA library and stops at the GPU"
