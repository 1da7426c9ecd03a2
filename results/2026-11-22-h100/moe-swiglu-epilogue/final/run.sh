#!/usr/bin/env bash
# Session 9 run k: the final binary. GEMM quick verify (every launch goes through the refactored
# launch path) and attention quick verify, then scripts/gpu-moe.sh (full MoE suite, the issue's
# table against torch).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-s9k; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; cat .carry/lead/commit-s9k; } > $OUT/machine.txt
timeout 240 $B --no-store verify --suite quick > $OUT/verify-gemm.txt 2>&1; echo "gemm verify rc $?: $(tail -1 $OUT/verify-gemm.txt)"
timeout 200 $B --no-store verify --op attention --suite quick > $OUT/verify-attn.txt 2>&1; echo "attention verify rc $?: $(tail -1 $OUT/verify-attn.txt)"
MOE_SUITE=full MOE_SWEEP=0 KILN_BIN=$B OUT=$OUT/moe bash scripts/gpu-moe.sh > $OUT/gpu-moe.txt 2>&1; echo "gpu-moe rc $?"
tail -11 $OUT/gpu-moe.txt
mv $OUT/moe/results.json $OUT/results.json; mv $OUT/moe/verify.json $OUT/verify-moe.json; rm -rf $OUT/moe
