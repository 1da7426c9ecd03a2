#!/usr/bin/env bash
# Session 9 run m: how much the SwiGLU's ring depth matters (4 vs 3 stages of 48 KB): quick MoE
# verify with 3 stages, then four alternating rounds at prefill.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-s9m; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; cat .carry/lead/commit-s9m; } > $OUT/machine.txt
PREFILL=1512,1091,539,772,779,979,880,964
KILN_SWIGLU_STAGES=3 timeout 300 $B --no-store moe verify --suite quick > $OUT/verify-3.txt 2>&1 || { echo "verify failed"; tail -5 $OUT/verify-3.txt; exit 1; }
echo "verify 3 stages: $(tail -1 $OUT/verify-3.txt)"
: > $OUT/ab.txt
V="s4 s3"
for round in 1 2 3 4; do
  for v in $V; do
    case $v in s4) E="KILN_SWIGLU_STAGES=4";; s3) E="KILN_SWIGLU_STAGES=3";; esac
    echo "== $v round $round" >> $OUT/ab.txt
    env $E timeout 120 $B --no-store moe bench --counts $PREFILL --n 3072 --k 4096 --swiglu >> $OUT/ab.txt 2>&1
  done
  set -- $V; V="$2 $1"
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
    if x: print(f"{piece:14s} {v:3s} median of rounds {st.median(x):.4f}  rounds {x}")
PY
