#!/usr/bin/env bash
# Session 13 run 11: where 1023^3's 27.5 us goes (repack/: 10.4 us at 1024^3). C alone
# unaligned (1023x1023x1024: N = 1023, so the register epilogue, mostly scalar stores), A and B
# alone copied (1024x1024x1023), both, and the aligned cube; register epilogue forced at 1024^3.
# Main 2e31975, one process each, 30 reps.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s13/kiln-2e31975; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: 2e31975"; } > $OUT/machine.txt
: > $OUT/ab.jsonl
for round in 1 2; do
for c in "1024x1024x1024 X=1" "1024x1024x1024 KILN_WGMMA_EPI=0" "1023x1023x1024 X=1" "1024x1024x1023 X=1" "1023x1023x1023 X=1" "4096x4095x4096 X=1" "4096x4096x4096 X=1"; do
  s=${c%% *}; e=${c#* }
  r=$(env $e timeout 90 $B --no-store bench --shape $s --reps 30 --json 2>>$OUT/err.txt)
  echo "{\"shape\":\"$s\",\"v\":\"$e\",\"round\":$round,\"r\":$r}" >> $OUT/ab.jsonl
done
done
python3 .carry/s13/parse_ab.py $OUT/ab.jsonl | tee $OUT/summary.txt
