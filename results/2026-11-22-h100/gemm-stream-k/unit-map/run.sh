#!/usr/bin/env bash
# Session 8 (q): swiglu_dual's work-unit mapping (swiglu_unit) replaced by the GEMM's unit_tile +
# split_range, now in common/split_k.cuh. GEMM CUBINs byte-identical; the 6 SwiGLU CUBINs changed
# (bookkeeping arithmetic only). Verify (MoE full suite; SwiGLU on 8 and 13 CTAs), then SwiGLU
# prefill old (main ff76bdc) vs new, four rotated rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
OLD=.carry/lead/kiln-s8q-old; NEW=.carry/lead/kiln-s8q; chmod +x $OLD $NEW
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "old ff76bdc; new = unit_tile/split_range shared"; } > $OUT/machine.txt
v() { local name=$1; shift; echo "== $name" >> $OUT/verify.txt; timeout 300 "$@" > /tmp/v.txt 2>&1; local rc=$?; tail -6 /tmp/v.txt >> $OUT/verify.txt; echo "verify $name exit $rc: $(tail -1 /tmp/v.txt)"; [ $rc -ne 0 ] && exit 1; }
v moe-full $NEW --no-store moe verify --suite full
for g in 8 13; do KILN_SWIGLU_GRID=$g v swiglu-grid$g $NEW --no-store moe verify --suite full --version swiglu_dual; done
PREFILL=1512,1091,539,772,779,979,880,964
: > /tmp/ab.txt
V="old new"
for round in 1 2 3 4; do
  for b in $V; do
    B=$OLD; [ $b = new ] && B=$NEW
    echo "== $b round $round" >> /tmp/ab.txt
    $B --no-store moe bench --counts $PREFILL --n 3072 --k 4096 --swiglu >> /tmp/ab.txt 2>&1
  done
  set -- $V; V="$2 $1"
done
cp /tmp/ab.txt $OUT/swiglu-ab.txt
python3 - /tmp/ab.txt <<'PY' | tee $OUT/summary.txt
import sys, collections, statistics as st
t = collections.defaultdict(list); v = None
for l in open(sys.argv[1]):
    if l.startswith('=='): v = l.split()[1]; continue
    if l.startswith('| swiglu_dual'):
        c = [x.strip() for x in l.split('|')]
        t[v].append(float(c[4]))
for v, x in sorted(t.items()): print(f"swiglu prefill {v:4s} median {st.median(x):.4f} ms  rounds {x}")
PY
