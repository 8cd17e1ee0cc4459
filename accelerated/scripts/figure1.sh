#!/usr/bin/env bash
# Figure 1 at a scale that learns: seven encodings (and the FIRE variants of "the FIRE
# question") trained on the Python 3.11 documentation with one recipe and three seeds each,
# evaluated at 128..2048 on the same held-out tokens, with the same-text view; then the table
# and the plot with spread.
#
# From a clean clone, one command (it builds fire-lm in release first):
#
#   apt-get install -y python3.11-doc     # the corpus (PSF licence), 497 documents, 12 MB
#   accelerated/scripts/figure1.sh        # writes runs/figure1/{table.md,summary.json,*.svg}
#
# Cost: 36 runs of 2 400 steps (4.9 M tokens each) and their evaluations. On the shared 2-core
# VM this was written on, with the fused Transformer block, a run took 11-32 min on one thread
# (RoPE slowest: it trains through candle's ops), about 2 h per seed for all twelve variants at
# two at a time. Check the whole pipeline in about ten minutes first:
#
#   SMOKE=1 accelerated/scripts/figure1.sh   # 2 steps, 1 seed, lengths 128,256: runs/figure1-smoke
#
# Resumable: every run writes a checkpoint every 200 steps; a stopped run resumes from it (bit
# for bit), a finished run or evaluation is skipped, so the script can be killed and rerun at
# any time, and a partial grid still gives a table (it says how many runs finished).
#
# Recipe (issue "Figure 1 at a scale that learns"): bytes, 4 layers, d_model 128, 4 heads,
# FFN 512, fan-in initialisation, training length 128, batch 16, 2 400 steps (4.9 M training
# tokens), AdamW lr 1e-3, betas (0.9, 0.95), weight decay 0.01 on matrices only, 100 warm-up
# steps then cosine to 0.1x, clip 1.0; FIRE with one hidden layer of 32, c = 0.1, L_init = 32.
#
# Environment:
#   SMOKE=1                  the tiny setting above (any variable below still overrides it)
#   SEEDS="0 1 2"            seeds
#   VARIANTS="..."           which runs (default: the seven encodings, then the FIRE question;
#                            see `variant_args` for the names)
#   JOBS=2                   training runs at a time (each RAYON_NUM_THREADS=1: on the shared
#                            2-core machine two one-thread runs beat one two-thread run)
#   STEPS=2400 MAX_WINDOWS=64 LENGTHS=128,256,512,1024,2048
#   FIRE_LM=path             a fire-lm binary to use instead of building target/release/fire-lm
#   CORPUS=/usr/share/doc/python3.11/html/_sources
#   NICE=19                  niceness of the training processes
#   PHASES="train eval report"
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
if [ -n "${SMOKE:-}" ]; then
  : "${STEPS:=2}" "${SEEDS:=0}" "${MAX_WINDOWS:=2}" "${LENGTHS:=128,256}"
  OUT=${1:-runs/figure1-smoke}
else
  OUT=${1:-runs/figure1}
fi
CORPUS=${CORPUS:-/usr/share/doc/python3.11/html/_sources}
SEEDS=${SEEDS:-0 1 2}
MAIN="kerple-log alibi t5 rope nope fire fire-s"
QUESTION="fire-depth2 fire-l64 fire-l128 fire-kerple-init fire-offsets"
VARIANTS=${VARIANTS:-$MAIN $QUESTION}
JOBS=${JOBS:-2}
STEPS=${STEPS:-2400}
MAX_WINDOWS=${MAX_WINDOWS:-64}
LENGTHS=${LENGTHS:-128,256,512,1024,2048}
NICE=${NICE:-19}
PHASES=${PHASES:-train eval report}

[ -d "$CORPUS" ] || { echo "corpus $CORPUS missing: apt-get install -y python3.11-doc" >&2; exit 1; }
if [ -n "${FIRE_LM:-}" ]; then
  BIN=$FIRE_LM
else
  # Up to date in a second when nothing changed; honours CARGO_TARGET_DIR.
  (cd "$ROOT" && cargo build --release --quiet -p fire-accelerated --bin fire-lm)
  BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/fire-lm
fi
[ -x "$BIN" ] || { echo "$BIN missing" >&2; exit 1; }
mkdir -p "$OUT/configs" "$OUT/runs" "$OUT/eval" "$OUT/logs"

# The training recipe, and its variant with randomised position offsets (0..1920, so training
# queries reach position 2047, the longest evaluation length).
write_train() {
  cat > "$1" <<EOF
seq_len: 128
batch: 16
steps: $STEPS
warmup: 100
lr: 0.001
min_lr_ratio: 0.1
clip: 1.0
adamw: {beta1: 0.9, beta2: 0.95, eps: 1.0e-8, weight_decay: 0.01}
held_out: 0.15
checkpoint_every: 200
log_every: 10
position_offset: $2
EOF
}
write_train "$OUT/configs/train.yaml" 0
write_train "$OUT/configs/train-offsets.yaml" 1920

# Model configs of the FIRE variants (the others are built from flags).
fire_yaml() { # name depth l_init [extra lines]
  cat > "$OUT/configs/$1.yaml" <<EOF
vocab_size: 256
init: fan-in
d_model: 128
n_layers: 4
n_heads: 4
d_ff: 512
encoding:
  kind: fire
  width: 32
  depth: $2
  c: 0.1
  l_init: $3
${4:-}
EOF
}
fire_yaml fire-depth2 2 32
fire_yaml fire-l64 1 64
fire_yaml fire-l128 1 128
# Theorem 3.1's Kerple-log construction at P = 128 = the training length (so the constructed
# FIRE equals a freshly initialised Kerple-log on every training pair), then trained.
fire_yaml fire-kerple-init 1 128 "  eps: 0.0
  transform: identity
  activation: symlog
  init: kerple-log"
fire_yaml fire-offsets 1 32

variant_args() { # the `fire-lm train` flags of a variant
  local shape="--d-model 128 --layers 4 --heads 4 --d-ff 512"
  case $1 in
    kerple-log|alibi|t5|rope|nope) echo "--encoding $1 $shape --train-config $OUT/configs/train.yaml" ;;
    fire|fire-s) echo "--encoding $1 --fire-l-init 32 $shape --train-config $OUT/configs/train.yaml" ;;
    fire-offsets) echo "--config $OUT/configs/$1.yaml --train-config $OUT/configs/train-offsets.yaml" ;;
    fire-depth2|fire-l64|fire-l128)
      echo "--config $OUT/configs/$1.yaml --train-config $OUT/configs/train.yaml" ;;
    # A symlog f_θ does not compile to pieces: the fused op would evaluate and differentiate it
    # pair by pair (~8x slower at batch 16); the candle path costs ~1.2x at length 128.
    fire-kerple-init)
      echo "--config $OUT/configs/$1.yaml --train-config $OUT/configs/train.yaml --attention materialised" ;;
    *) echo "unknown variant $1" >&2; return 1 ;;
  esac
}

finished() { [ "$(cat "$1/latest" 2>/dev/null)" = "$(printf 'step-%07d' "$STEPS")" ]; }

machine() {
  echo "date: $(date -u +%FT%TZ)"
  echo "nproc: $(nproc)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "fire-lm: $BIN, $("$BIN" --version)${FIRE_LM:+ (given by FIRE_LM, not built here)}"
  echo "source tree: $(git -C "$HERE" rev-parse --short HEAD 2>/dev/null || echo unknown)"
}

train_one() { # variant seed
  local v=$1 s=$2 run="$OUT/runs/$1/s$2" log="$OUT/logs/$1-s$2.log"
  if finished "$run"; then return 0; fi
  local resume=""
  [ -f "$run/latest" ] && resume="--resume"
  echo "[$(date +%T)] train $v seed $s ${resume:-(fresh)}"
  local t0=$SECONDS
  # shellcheck disable=SC2046
  RAYON_NUM_THREADS=1 nice -n "$NICE" "$BIN" train --run "$run" $resume \
    $( [ -z "$resume" ] && variant_args "$v" ) --corpus "$CORPUS" --seed "$s" --steps "$STEPS" \
    --quiet >> "$log" 2>&1 || {
    echo "[$(date +%T)] $v seed $s FAILED (see $log)"
    echo "$v seed $s: $log" >> "$OUT/failed.txt"
    return 1
  }
  printf '%s\t%s\t%s\t%s\n' "$v" "$s" "$((SECONDS - t0))" "$(cut -d' ' -f1 /proc/loadavg)" >> "$OUT/wall-times.tsv"
  echo "[$(date +%T)] done $v seed $s in $((SECONDS - t0)) s"
}

if [[ " $PHASES " == *" train "* ]]; then
  rm -f "$OUT/failed.txt"
  machine > "$OUT/machine-start.txt"
  # Seed-major order: every variant at seed 0 first, so a partial grid is a complete picture
  # at fewer seeds.
  queue=()
  for s in $SEEDS; do for v in $VARIANTS; do queue+=("$v:$s"); done; done
  running=0
  for item in "${queue[@]}"; do
    train_one "${item%%:*}" "${item##*:}" &
    running=$((running + 1))
    if [ "$running" -ge "$JOBS" ]; then wait -n || true; running=$((running - 1)); fi
  done
  wait || true
  machine > "$OUT/machine-end.txt"
fi

if [[ " $PHASES " == *" eval "* ]]; then
  for s in $SEEDS; do for v in $VARIANTS; do
    run="$OUT/runs/$v/s$s" out="$OUT/eval/$v-s$s"
    finished "$run" || continue
    [ -f "$out/eval.json" ] && continue
    echo "[$(date +%T)] eval $v seed $s"
    RAYON_NUM_THREADS=${EVAL_THREADS:-2} nice -n "$NICE" "$BIN" eval "$run" --lengths "$LENGTHS" \
      --max-windows "$MAX_WINDOWS" --split-at 128 --out "$out.tmp" > "$OUT/logs/eval-$v-s$s.log" 2>&1
    rm -rf "$out" && mv "$out.tmp" "$out"
  done; done
fi

if [[ " $PHASES " == *" report "* ]]; then
  python3 "$HERE/figure1_report.py" "$OUT" --seeds "$SEEDS" --steps "$STEPS" \
    --main "$MAIN" --question "$QUESTION" --lengths "$LENGTHS"
fi

# A run that failed leaves the others (and the table) standing; say so, and fail.
if [ -s "$OUT/failed.txt" ]; then
  echo "failed runs (rerun to retry; finished runs are kept):" >&2
  cat "$OUT/failed.txt" >&2
  exit 1
fi
