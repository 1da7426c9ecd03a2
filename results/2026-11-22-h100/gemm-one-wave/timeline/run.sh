#!/usr/bin/env bash
# Session 11 run 13: `kiln profile --timeline` (the instrumented wgmma_tma_ws variant: per-CTA
# stamps of setup, first loads, first full stage, mainloop end, stores done) at one-wave shapes
# where kiln loses in the kernel (512x4096x4096, 2048^3, 1024^3), 512^3, and 4096^3 for contrast.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s11/kiln-tl; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "main $(cat .carry/s11/commit-head) + the timeline (uncommitted)"; } > $OUT/machine.txt
for s in 512x4096x4096 2048x2048x2048 1024x1024x1024 512x512x512 128x4096x4096 4096x4096x4096; do
  timeout 60 $B --no-store profile gemm wgmma_tma_ws --shape $s --timeline --reps 5 2>&1 | tee -a $OUT/timeline.txt
  timeout 60 $B --no-store --json profile gemm wgmma_tma_ws --shape $s --timeline --reps 5 >> $OUT/timeline.jsonl 2>&1
done
