#!/usr/bin/env bash
# The "mini Figure 1": tiny FIRE, FIRE-S, RoPE, NoPE, Alibi, Kerple-log and T5 models trained at
# length 128 on the Python 3.11 documentation with equal budgets, evaluated at 128..1024.
#
#   apt-get install -y python3.11-doc          # the corpus (PSF licence), ~500 documents, 12 MB
#   cargo build --release -p fire-accelerated --bin fire-lm
#   accelerated/scripts/mini-figure1.sh [OUT_DIR]           # default runs/mini-figure1
#
# Budget per model: 300 steps x 16 sequences x 128 tokens = 614 400 tokens, one CPU thread.
# FIRE's init_L is 32 (= 128/4, the paper's 512/2048 ratio); RoPE-PI is not in this set.
# `--init gpt2`: the scheme the README's table was measured with (fire-lm's default was GPT-2's then).
set -euo pipefail
OUT=${1:-runs/mini-figure1}
BIN=${FIRE_LM:-target/release/fire-lm}
CORPUS=${CORPUS:-/usr/share/doc/python3.11/html/_sources}
ENCODINGS=${ENCODINGS:-fire fire-s rope nope alibi kerple-log t5}
export RAYON_NUM_THREADS=${RAYON_NUM_THREADS:-1}
[ -d "$CORPUS" ] || { echo "corpus $CORPUS missing: apt-get install -y python3.11-doc" >&2; exit 1; }
mkdir -p "$OUT"
runs=()
for enc in $ENCODINGS; do
  run="$OUT/$enc"
  if [ ! -f "$run/latest" ]; then
    /usr/bin/time -v "$BIN" train --run "$run" --encoding "$enc" --corpus "$CORPUS" \
      --d-model 64 --layers 2 --heads 4 --d-ff 256 --fire-l-init 32 --init gpt2 \
      --seq-len 128 --batch 16 --steps 300 --warmup 30 --lr 3e-3 --seed 0 --quiet \
      2> "$OUT/$enc.time.txt" | tee "$OUT/$enc.train.txt"
  fi
  runs+=("$run")
done
"$BIN" eval "${runs[@]}" --lengths 128,256,512,1024 --max-windows 32 --out "$OUT" | tee "$OUT/table.txt"
