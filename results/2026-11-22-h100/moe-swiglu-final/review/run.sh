#!/usr/bin/env bash
# Session 10 review mend: the fold's split partials through split_k.cuh's helpers and one
# swiglu_silu (only the six SwiGLU CUBINs changed). MoE quick verify (default, grid 13, grid 5:
# split tails with folded tiles), then HEAD (kiln-h) vs mend (kiln-i), three alternating rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
H=.carry/s10/kiln-h; B=.carry/s10/kiln-i; chmod +x $H $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; cat .carry/s10/commit-i; } > $OUT/machine.txt
PREFILL=1512,1091,539,772,779,979,880,964
: > $OUT/verify.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; env "$@" timeout 300 $B --no-store moe verify --suite quick >> $OUT/verify.txt 2>&1; local rc=$?; echo "verify $tag rc $rc: $(tail -1 $OUT/verify.txt)"; [ $rc -eq 0 ] || { tail -8 $OUT/verify.txt; echo STOP; exit 1; }; }
v quick
v grid13 KILN_SWIGLU_GRID=13
v grid5 KILN_SWIGLU_GRID=5
: > $OUT/ab.txt
V="head mend"
for round in 1 2 3; do
  for v in $V; do
    case $v in head) X=$H;; mend) X=$B;; esac
    echo "== $v round $round" >> $OUT/ab.txt
    timeout 120 $X --no-store moe bench --counts $PREFILL --n 3072 --k 4096 --swiglu >> $OUT/ab.txt 2>&1
  done
  set -- $V; V="$2 $1"
done
grep -E '^==|swiglu_dual' $OUT/ab.txt | awk '/^==/{v=$2} /swiglu_dual/{split($0,c,"|"); print v, c[5]}' | sort | tee $OUT/summary.txt
