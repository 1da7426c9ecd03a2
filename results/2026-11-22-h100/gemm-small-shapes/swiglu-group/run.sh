#!/usr/bin/env bash
# Session 7: SwiGLU prefill waits on loads (ncu: 23 % of stall samples on the full-barrier
# retries, DRAM 46 %): grouped-order widths KILN_MOE_GROUP 4 / 8 (default) / 12 / 16 / 24 / 63,
# two rotated rounds, moe bench defaults.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-s7i; chmod +x $B
PREFILL=1512,1091,539,772,779,979,880,964
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: c08644d"; } > $OUT/machine.txt
: > $OUT/g.txt
G="8 4 12 16 24 63"
for round in 1 2; do
  for g in $G; do
    echo "== $g" >> $OUT/g.txt
    KILN_MOE_GROUP=$g $B --no-store moe bench --counts $PREFILL --n 3072 --k 4096 --swiglu >> $OUT/g.txt 2>&1
  done
  G="63 24 16 12 4 8"
done
python3 - $OUT/g.txt <<'PY' | tee $OUT/summary.txt
import sys, collections, statistics as st
t = collections.defaultdict(list); g = None
for l in open(sys.argv[1]):
    if l.startswith('=='): g = int(l.split()[1]); continue
    if l.startswith('| swiglu_dual') or l.startswith('| down_proj'):
        c = [x.strip() for x in l.split('|')]
        t[(g, c[1])].append(float(c[4]))
for (g, piece), x in sorted(t.items()):
    print(f"group {g:3d} {piece:12s} {st.median(x):.4f} ms  {x}")
PY
