#!/usr/bin/env bash
# After merging compile-s4 (grouped_swapab stores rewritten, wgmma wrappers regenerated, NVRTC
# --minimal): quick verifies of every op with the merged binary, then the MoE grouped GEMM old
# (pre-merge) vs merged in alternating rounds on the three plain shapes.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=$OUT/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
M=.carry/lead/kiln-merged; O=.carry/lead/kiln-new; chmod +x $M $O
{ nvidia-smi --query-gpu=name --format=csv; date -u; } > $OUT/machine.txt
timeout 200 $M --no-store verify --suite quick > $OUT/verify-gemm.txt 2>&1; echo "gemm verify exit $?"; tail -1 $OUT/verify-gemm.txt
timeout 150 $M --no-store attn verify --suite quick > $OUT/verify-attn.txt 2>&1; echo "attn verify exit $?"
timeout 150 $M --no-store moe verify --suite quick > $OUT/verify-moe.txt 2>&1; echo "moe verify exit $?"; tail -2 $OUT/verify-moe.txt
PREFILL=1512,1091,539,772,779,979,880,964; SMALL1=40,248,112,176,64,200,136,96; SMALL2=40,196,88,152,64,120,180,104
for round in 1 2; do for bin in O M; do B=${!bin}
  for sh in "$PREFILL 3072 4096" "$SMALL1 4096 7168" "$SMALL2 7168 2048"; do set -- $sh
    echo "round $round $bin counts=$1 n=$2 k=$3"; timeout 60 $B --no-store moe bench --counts $1 --n $2 --k $3 --reps 20 2>&1 | grep -E "^\| (grouped|kiln|fused|tile)|TFLOPS|^\| [a-z_]+ " | head -4
  done; done; done 2>&1 | tee $OUT/moe-ab.txt | grep -v "^|--" 
