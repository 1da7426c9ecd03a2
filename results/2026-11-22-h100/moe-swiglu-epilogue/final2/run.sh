#!/usr/bin/env bash
# Session 9 run l: a second sample of the MoE table with the final binary (a93fdaf, same
# SASS as run k): scripts/gpu-moe.sh with the full suite, run twice back to back.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-s9l; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; cat .carry/lead/commit-s9l; } > $OUT/machine.txt
for r in 1 2; do
  MOE_SUITE=$([ $r = 1 ] && echo full || echo quick) MOE_SWEEP=0 KILN_BIN=$B OUT=$OUT/moe$r bash scripts/gpu-moe.sh > $OUT/gpu-moe-$r.txt 2>&1; echo "gpu-moe $r rc $?"
  tail -9 $OUT/gpu-moe-$r.txt
  mv $OUT/moe$r/results.json $OUT/results-$r.json; rm -rf $OUT/moe$r
done
