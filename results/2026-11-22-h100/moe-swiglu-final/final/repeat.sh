#!/usr/bin/env bash
# Session 10 final, repeats: the table twice more with the final binary (quick suite
# first each time), to show the spread of the ratios on one machine.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
{ cat .carry/s10/commit-final; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; } > $OUT/machine.txt
for r in 1 2; do
  mkdir -p $OUT/run$r
  OUT=$OUT/run$r KILN_BIN=.carry/s10/kiln-final MOE_SUITE=quick MOE_SWEEP=0 timeout 280 bash scripts/gpu-moe.sh > $OUT/run$r/log.txt 2>&1; echo "run $r rc $?"
  rm -f $OUT/run$r/kiln.db
  tail -10 $OUT/run$r/log.txt | head -9
done
