#!/usr/bin/env bash
# GPU evidence for issues 3 and 4 on wgmma_tma_ws, run on the lent GPU machine from the repo root
# with the release binary at $BIN (built here, carried). Everything lands in $OUT:
#   (a) cold compile of every variant (`kiln check`, the machine's cores in parallel);
#   (b) exhaustive tuning of wgmma_tma_ws at six shapes, each landscape saved, and the
#       evolutionary search replayed against each landscape;
#   (c) the RC target set timed against cuBLAS with the tuned cache (the store of (b)).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kiln-out}
mkdir -p "$OUT/land"
export KILN_STORE="$OUT/kiln.db"
export KILN_CACHE_DIR=${KILN_CACHE_DIR:-/tmp/kiln-jit}
BIN=${BIN:-.carry/kiln}
chmod +x "$BIN"
step() { # name, timeout seconds, command...
  local name=$1 limit=$2
  shift 2
  echo "=== $name: $*" | tee "$OUT/$name.txt"
  local t0=$SECONDS
  timeout "$limit" "$@" 2>&1 | tee -a "$OUT/$name.txt"
  echo "=== $name: exit ${PIPESTATUS[0]} after $((SECONDS - t0)) s" | tee -a "$OUT/$name.txt"
}
"$BIN" devices | tee "$OUT/devices.txt"
rm -rf "$KILN_CACHE_DIR"
step check 120 "$BIN" check
step warm 60 "$BIN" check
for s in 4096x4096x4096 8192x8192x8192 2048x2048x2048 1024x1024x1024 512x4096x14336 128x4096x14336; do
  step "tune-$s" 150 "$BIN" tune --version wgmma_tma_ws --shape "$s" --search exhaustive \
    --landscape "$OUT/land/ws-$s.json" --reps 15
  "$BIN" tune-replay --landscape "$OUT/land/ws-$s.json" --trials 100 >>"$OUT/replay.txt" 2>&1
done
step bench-tuned 200 "$BIN" bench --set targets --layouts RC --reps 15

cd "$OUT" && tar czf tune.tgz land tune-*.txt replay.txt && rm -rf land tune-*.txt replay.txt
