#!/usr/bin/env bash
# Session 9 run c: does cutting the bytes each CTA requests per FLOP pay at prefill sizes?
# (1) plain grouped GEMM prefill 128x256 single vs CTA pairs along N multicasting X (-17 % of the
# requested bytes per CTA); (2) kiln's dense GEMM at the SwiGLU's computed size (7872x6144x4096
# RC) single vs B-multicast pairs, with cuBLAS; (3) the SwiGLU at prefill and at 8 x 1024 rows
# (no padded rows). Four rotated rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-s9c; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; cat .carry/lead/commit-s9c; } > $OUT/machine.txt
PREFILL=1512,1091,539,772,779,979,880,964
EVEN=1024,1024,1024,1024,1024,1024,1024,1024
timeout 300 $B --no-store moe verify --suite quick > $OUT/verify.txt 2>&1 || { echo "verify failed"; tail -5 $OUT/verify.txt; exit 1; }
KILN_MOE_TILE="128x256 c2" timeout 300 $B --no-store moe verify --suite quick > $OUT/verify-c2.txt 2>&1 || { echo "verify c2 failed"; tail -5 $OUT/verify-c2.txt; exit 1; }
echo "verify: $(tail -1 $OUT/verify.txt) / c2: $(tail -1 $OUT/verify-c2.txt)"
: > $OUT/ab.txt
V="single pair"
for round in 1 2 3 4; do
  for v in $V; do
    case $v in single) E1="KILN_MOE_TILE=128x256"; E2="KILN_WGMMA_CFG=large";; pair) E1="KILN_MOE_TILE=128x256c2"; E2="KILN_WGMMA_CFG=pair";; esac
    echo "== $v round $round" >> $OUT/ab.txt
    env $E1 timeout 120 $B --no-store moe bench --counts $PREFILL --n 3072 --k 4096 >> $OUT/ab.txt 2>&1
    env $E2 timeout 120 $B --no-store bench --shape 7872x6144x4096 --layout RC >> $OUT/ab.txt 2>&1
  done
  echo "== swiglu round $round" >> $OUT/ab.txt
  timeout 120 $B --no-store moe bench --counts $PREFILL --n 3072 --k 4096 --swiglu >> $OUT/ab.txt 2>&1
  echo "== even round $round" >> $OUT/ab.txt
  timeout 120 $B --no-store moe bench --counts $EVEN --n 3072 --k 4096 --swiglu >> $OUT/ab.txt 2>&1
  set -- $V; V="$2 $1"
done
python3 - $OUT/ab.txt <<'PY' | tee $OUT/summary.txt
import sys, collections, statistics as st
t = collections.defaultdict(list); v = None
for l in open(sys.argv[1]):
    if l.startswith('=='): v = l.split()[1]; continue
    if l.startswith('| '):
        c = [x.strip() for x in l.split('|')]
        for i in (4, 3, 5):
            try: t[(c[1], v)].append(float(c[i])); break
            except (ValueError, IndexError): pass
for (piece, v), x in sorted(t.items()):
    if x: print(f"{piece:22s} {v:7s} median of rounds {st.median(x):.4f}  rounds {x}")
PY
