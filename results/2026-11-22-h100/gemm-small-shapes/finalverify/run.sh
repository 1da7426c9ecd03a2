#!/usr/bin/env bash
# Session 7 closing check of the final binary (c08644d): with the new heuristic, multi-wave aligned
# shapes run single CTAs with all four chunks deferred, so the full GEMM suite (its 4097 edges:
# partial last chunks, several tiles per CTA) and a few extra many-tile edge shapes go through
# that path; then the quick suite with the deferral off (KILN_WGMMA_DEFER=0).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-s7i; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: c08644d"; } > $OUT/machine.txt
timeout 240 $B --no-store verify --suite full --version wgmma_tma_ws > $OUT/verify-full.txt 2>&1; echo "verify full exit $?" | tee $OUT/verify.txt; tail -1 $OUT/verify-full.txt | tee -a $OUT/verify.txt
for sh in 3000x5000x300 4097x4104x64 2048x6000x1000 5000x3000x128; do for l in RC RR; do
  timeout 60 $B --no-store verify --shape $sh --layout $l --version wgmma_tma_ws > $OUT/v.txt 2>&1; echo "verify $sh $l exit $? $(tail -1 $OUT/v.txt)" | tee -a $OUT/verify.txt
done; done
KILN_WGMMA_DEFER=0 timeout 90 $B --no-store verify --suite quick --version wgmma_tma_ws > $OUT/v.txt 2>&1; echo "verify quick DEFER=0 exit $? $(tail -1 $OUT/v.txt)" | tee -a $OUT/verify.txt
