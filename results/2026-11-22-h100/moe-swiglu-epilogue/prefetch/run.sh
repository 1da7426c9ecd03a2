#!/usr/bin/env bash
# Session 9 run b: the SwiGLU producer's L2 prefetch of W (and X) boxes ahead of its loads.
# Verify the swiglu suite with prefetch 8 and 8,x (grid capped too, so the split units prefetch
# across unit ends), then 4 rotated rounds at prefill: off / 4 / 8 / 16 / 8,x.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-s9b; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; cat .carry/lead/commit-s9b; } > $OUT/machine.txt
PREFILL=1512,1091,539,772,779,979,880,964
$B --no-store moe check | tail -1
v() { local tag=$1; shift; env "$@" timeout 300 $B --no-store moe verify --suite ${SUITE:-quick} > $OUT/verify-$tag.txt 2>&1; local rc=$?; echo "verify $tag rc $rc: $(tail -1 $OUT/verify-$tag.txt)"; [ $rc -eq 0 ] || { echo STOP; exit 1; }; }
SUITE=full v full-pf8 KILN_MOE_PREFETCH=8
v quick-pf8x-grid13 KILN_MOE_PREFETCH=8,x KILN_SWIGLU_GRID=13
v quick-pf3-grid8 KILN_MOE_PREFETCH=3 KILN_SWIGLU_GRID=8
: > $OUT/ab.txt
V="pf0 pf4 pf8 pf16 pf8x"
for round in 1 2 3 4; do
  for v in $V; do
    case $v in pf0) E="KILN_MOE_PREFETCH=0";; pf4) E="KILN_MOE_PREFETCH=4";; pf8) E="KILN_MOE_PREFETCH=8";; pf16) E="KILN_MOE_PREFETCH=16";; pf8x) E="KILN_MOE_PREFETCH=8,x";; esac
    echo "== $v round $round" >> $OUT/ab.txt
    env $E timeout 120 $B --no-store moe bench --counts $PREFILL --n 3072 --k 4096 --swiglu >> $OUT/ab.txt 2>&1
  done
  set -- $V; V="$2 $3 $4 $5 $1"
done
python3 - $OUT/ab.txt <<'PY' | tee $OUT/summary.txt
import sys, collections, statistics as st
t = collections.defaultdict(list); v = None
for l in open(sys.argv[1]):
    if l.startswith('=='): v = l.split()[1]; continue
    if l.startswith('| '):
        c = [x.strip() for x in l.split('|')]
        try: t[(c[1], v)].append(float(c[4]))
        except (ValueError, IndexError): pass
for (piece, v), x in sorted(t.items()):
    print(f"{piece:14s} {v:6s} median of rounds {st.median(x):.4f} ms  rounds {x}")
PY
