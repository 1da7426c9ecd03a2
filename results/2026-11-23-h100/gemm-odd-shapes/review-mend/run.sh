#!/usr/bin/env bash
# Session 13 run 18: review mend (host only: repack's two operand branches as one closure, the
# copy's leading dimension from one helper shared with as_read). The copy paths verified again.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
N=.carry/s13/kiln-mend; chmod +x $N
{ nvidia-smi --query-gpu=name --format=csv; date -u; echo "binary: 8354fce + review mend"; } > $OUT/machine.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; timeout 400 $N --no-store verify --version wgmma_tma_ws "$@" >> $OUT/verify.txt 2>&1; echo "verify $tag rc $?: $(grep wgmma_tma_ws $OUT/verify.txt | tail -1)"; }
v full --suite full
v a-only --shape 1023x512x1023 --ldb 1024 --layout RC
v b-only --shape 512x1023x1023 --lda 1024 --layout RC
v both-cc --shape 777x1234x999 --layout CC --beta 1 --out f32
$N --no-store bench --shape 1023 --reps 30 2>&1 | tail -3 | tee $OUT/bench.txt
