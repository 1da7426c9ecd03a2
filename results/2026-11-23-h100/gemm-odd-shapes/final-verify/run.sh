#!/usr/bin/env bash
# Session 13 run 15: the final binary (33e1268: C through scratch only when its rows are off 16
# bytes) verified: full suite, quick suite with the default dispatch for every version, the
# C-path shapes, sanitize; 1023^3 and 4096x4095x4096 timed once.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
N=.carry/s13/kiln-33e1268; chmod +x $N
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: 33e1268"; } > $OUT/machine.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; timeout 400 $N --no-store verify "$@" >> $OUT/verify.txt 2>&1; local rc=$?; echo "verify $tag rc $rc: $(grep -E '^\| (wgmma_tma_ws|mma_sync) ' $OUT/verify.txt | tail -1)"; }
v full --version wgmma_tma_ws --suite full
v quick-all --suite quick
v c-odd --version wgmma_tma_ws --shape 1023x1023x1024 --beta 0.5
v c-odd-f32 --version wgmma_tma_ws --shape 1023x1023x1024 --out f32 --beta -1
v n-odd-ldc-aligned --version wgmma_tma_ws --shape 1024x1023x512 --ldc 1024 --beta 0.25
v n-odd-ldc-aligned-16 --version wgmma_tma_ws --shape 1024x1023x512 --ldc 1024
v all-odd --version wgmma_tma_ws --shape 777x1234x999 --layout CC
timeout 280 $N --no-store sanitize --version wgmma_tma_ws --timeout 120 > $OUT/sanitize.txt 2>&1; echo "sanitize rc $?"; tail -2 $OUT/sanitize.txt
for s in 1023 4096x4095x4096 1024x1023x512; do
  $N --no-store bench --shape $s --reps 30 2>&1 | tail -3 | tee -a $OUT/bench.txt
done
