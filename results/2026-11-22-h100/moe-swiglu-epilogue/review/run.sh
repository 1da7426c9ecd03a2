#!/usr/bin/env bash
# Session 9 run o: after the review's mends (one index ring for the dynamically scheduled MoE
# kernels, one ex2, one quad transpose, moe_store8 through moe_store8_packed). SASS identical to
# HEAD except grouped_gemm's epilogue (the fallback stores share the packs). Full MoE verify,
# attention quick verify, then grouped GEMM prefill / small-M and SwiGLU, base vs new, 3 rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
OLD=.carry/lead/kiln-s9o-base; NEW=.carry/lead/kiln-s9o; chmod +x $OLD $NEW
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; cat .carry/lead/commit-s9o; } > $OUT/machine.txt
timeout 300 $NEW --no-store moe verify --suite full > $OUT/verify-moe.txt 2>&1; echo "moe verify rc $?: $(tail -n1 $OUT/verify-moe.txt)"
timeout 200 $NEW --no-store attn verify --suite quick > $OUT/verify-attn.txt 2>&1; echo "attn verify rc $?: $(tail -n1 $OUT/verify-attn.txt)"
PREFILL=1512,1091,539,772,779,979,880,964; SMALL1=40,248,112,176,64,200,136,96
: > $OUT/ab.txt
V="base new"
for round in 1 2 3; do
  for v in $V; do
    case $v in base) B=$OLD;; new) B=$NEW;; esac
    echo "== $v round $round" >> $OUT/ab.txt
    timeout 120 $B --no-store moe bench --counts $PREFILL --n 3072 --k 4096 >> $OUT/ab.txt 2>&1
    timeout 120 $B --no-store moe bench --counts $SMALL1 --n 4096 --k 7168 >> $OUT/ab.txt 2>&1
    timeout 120 $B --no-store moe bench --counts $PREFILL --n 3072 --k 4096 --swiglu >> $OUT/ab.txt 2>&1
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
        try: t[(c[1], c[2][:30], v)].append(float(c[4]))
        except (ValueError, IndexError): pass
for (piece, prob, v), x in sorted(t.items()):
    if x: print(f"{piece:13s} {prob:30s} {v:4s} median {st.median(x):.4f}  rounds {x}")
PY
