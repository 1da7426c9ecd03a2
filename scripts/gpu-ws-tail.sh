#!/usr/bin/env bash
# GPU run for the last-wave split heuristic of wgmma_tma_ws (issue 3): the quick suite with the
# new default, the shapes it changes timed against the old pick (CTA pairs, unsplit) in
# alternating rounds, and the whole target set in every layout against cuBLAS. From the repo root
# on the lent GPU machine, release binary at $BIN. Output under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kiln-out}
mkdir -p "$OUT/log"
export KILN_STORE="$OUT/kiln.db"
export KILN_CACHE_DIR=${KILN_CACHE_DIR:-/tmp/kiln-jit}
BIN=${BIN:-.carry/kiln}
chmod +x "$BIN"
"$BIN" devices | tee "$OUT/devices.txt"
"$BIN" check --version wgmma_tma_ws >/dev/null 2>&1
"$BIN" verify --version wgmma_tma_ws --suite quick 2>&1 | tee "$OUT/log/verify-quick.txt" | tail -2
for round in 1 2; do
  for s in 512x128256x4096 8192x14336x4096 16384x16384x16384; do
    for mode in default pair; do
      if [ $mode = pair ]; then export KILN_WGMMA_CFG=pair; else unset KILN_WGMMA_CFG; fi
      echo "round $round $mode $s $("$BIN" bench --version wgmma_tma_ws --shape $s --reps 15 2>&1 | grep 'wgmma_tma_ws ' | awk -F'|' '{print $7, $8}')" | tee -a "$OUT/log/ab.txt"
    done
  done
done
unset KILN_WGMMA_CFG
"$BIN" bench --set targets --layouts RC,CR,RR,CC --reps 15 2>&1 | tee "$OUT/log/bench-all.txt" | grep "geometric"
"$BIN" --json bench --set targets --layouts RC,CR,RR,CC --reps 15 > "$OUT/log/bench-all-2.json" 2>"$OUT/log/bench-all-2.err"
cd "$OUT" && tar czf results.tgz log && rm -rf log
