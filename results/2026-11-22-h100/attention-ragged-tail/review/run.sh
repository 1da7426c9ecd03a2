#!/usr/bin/env bash
# Review refactor check: fa3_wgmma's merges now share store_partial / fold_partial (12 variants'
# CUBINs changed: the three-consumer plain-loop ones), scratch buffers share device::Scratch, and
# the benches share time_one / BenchOptions::plan. Verify the new binary (full attention suite,
# split and parts problems, GEMM and MoE quick), then old (kiln-final, 68486fc) / new on three
# attention shapes, two rounds; one GEMM and one MoE bench through the new timing path.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
L=.carry/lead; chmod +x $L/kiln-*
B=$L/kiln-new
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; } > $OUT/machine.txt
V="timeout 120 $B --no-store attn verify --version fa3_wgmma"
{
$V; echo "attn full exit $?"
for d in 128 64; do
  $V --batch 1 --heads 8 --seqlen 4096 --dim $d; echo "B1 H8 S4096 d$d exit $?"
  $V --batch 2 --heads 16 --seqlen 1000 --dim $d; echo "B2 H16 S1000 d$d exit $?"
done
$V --batch 1 --heads 9 --seqlen 2048 --dim 256; echo "B1 H9 S2048 d256 exit $?"
timeout 200 $B --no-store verify --suite quick --version wgmma_tma_ws; echo "gemm quick exit $?"
timeout 200 $B --no-store moe verify; echo "moe exit $?"
} > $OUT/verify.txt 2>&1
grep exit $OUT/verify.txt
: > $OUT/bench.txt
for round in 1 2; do for s in "128 4 4096" "64 4 4096" "128 2 8192"; do set -- $s; for bin in final new; do
  r=$($L/kiln-$bin --no-store --json attn bench --batch $2 --heads 16 --seqlen $3 --dim $1 --version fa3_wgmma --reps 20 2>/dev/null | tr -d '\n' | python3 -c 'import json,sys; x=json.load(sys.stdin)[0]; print(round(x["tflops"],1))')
  echo "round $round d$1 B$2 S$3 $bin $r" | tee -a $OUT/bench.txt
done; done; done
$B --no-store bench --shape 4096 --version wgmma_tma_ws --reps 10 2>&1 | tail -3 | tee -a $OUT/bench.txt
$B --no-store moe bench --reps 10 2>&1 | tail -4 | tee -a $OUT/bench.txt
