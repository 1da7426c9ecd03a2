#!/usr/bin/env bash
# GPU run for mma_sync's element-load variant (rows not 16-byte aligned) and the interleaved
# bench (issue 3). From the repo root on the lent GPU machine, release binary at $BIN.
#   (a) mma_sync on the full suite (it now runs the unaligned problems it used to refuse) and
#       the default dispatch on the quick suite;
#   (b) unaligned shapes: mma_sync (element loads) against simt_tiled and cuBLAS;
#   (c) the RC target set, interleaved against cuBLAS (the new default).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kiln-out}
mkdir -p "$OUT/log"
export KILN_STORE="$OUT/kiln.db"
export KILN_CACHE_DIR=${KILN_CACHE_DIR:-/tmp/kiln-jit}
BIN=${BIN:-.carry/kiln}
chmod +x "$BIN"
"$BIN" devices | tee "$OUT/devices.txt"
"$BIN" check --version mma_sync >/dev/null 2>&1
"$BIN" verify --version mma_sync --suite full 2>&1 | tee "$OUT/log/verify-mma_sync-full.txt" | tail -3
"$BIN" verify --suite quick 2>&1 | tee "$OUT/log/verify-default-quick.txt" | tail -12
for s in "4096x4096x4095 RC" "4095x4095x4095 RR" "4096x4096x4095 CC" "2047x2047x2047 CR"; do
  set -- $s
  "$BIN" bench --version mma_sync --version simt_tiled --shape $1 --layout $2 --reps 10 2>&1 | tee -a "$OUT/log/bench-unaligned.txt" | grep -v "^|--"
done
"$BIN" bench --set targets --layouts RC --reps 15 2>&1 | tee "$OUT/log/bench-rc-interleaved.txt" | grep geometric
cd "$OUT" && tar czf results.tgz log && rm -rf log
