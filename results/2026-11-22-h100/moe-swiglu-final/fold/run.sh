#!/usr/bin/env bash
# Session 10 run 7: SwiGLU remainders folded into the tile before: KILN_SWIGLU_FOLD 0, 16, 32,
# same binary. MoE quick verify with the fold (grid 13 too), full suite with it; then four
# alternating rounds at prefill (separate and interleaved W); torch once.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s10/kiln-f; chmod +x $B
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; cat .carry/s10/commit-f; } > $OUT/machine.txt
PREFILL=1512,1091,539,772,779,979,880,964
: > $OUT/verify.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; env "$@" timeout 300 $B --no-store moe verify --suite ${SUITE:-quick} >> $OUT/verify.txt 2>&1; local rc=$?; echo "verify $tag rc $rc: $(tail -1 $OUT/verify.txt)"; [ $rc -eq 0 ] || { tail -8 $OUT/verify.txt; echo STOP; exit 1; }; }
v quick-fold KILN_SWIGLU_FOLD=32
v quick-nofold KILN_SWIGLU_FOLD=0
v quick-fold16 KILN_SWIGLU_FOLD=16
v grid13-fold KILN_SWIGLU_FOLD=32 KILN_SWIGLU_GRID=13
v grid5-fold KILN_SWIGLU_FOLD=32 KILN_SWIGLU_GRID=5
SUITE=full v full-fold KILN_SWIGLU_FOLD=32
: > $OUT/ab.txt
V="f0 f16 f32"
for round in 1 2 3 4; do
  for v in $V; do
    case $v in f0) M=0;; f16) M=16;; f32) M=32;; esac
    echo "== $v round $round" >> $OUT/ab.txt
    KILN_SWIGLU_FOLD=$M timeout 120 $B --no-store moe bench --counts $PREFILL --n 3072 --k 4096 --swiglu >> $OUT/ab.txt 2>&1
    KILN_SWIGLU_FOLD=$M timeout 120 $B --no-store moe bench --counts $PREFILL --n 3072 --k 4096 --swiglu --interleaved >> $OUT/ab.txt 2>&1
  done
  set -- $V; V="$2 $3 $1"
done
timeout 180 $PY scripts/moe_peer.py --counts $PREFILL --n 3072 --k 4096 --swiglu > $OUT/peer.json 2>&1
python3 - $OUT/ab.txt $OUT/peer.json <<'PY' | tee $OUT/summary.txt
import sys, json, collections, statistics as st
t = collections.defaultdict(list); v = None
for l in open(sys.argv[1]):
    if l.startswith('=='): v = l.split()[1]; continue
    if l.startswith('| '):
        c = [x.strip() for x in l.split('|')]
        try: t[(c[1] + (' il' if 'interleaved' in c[2] else ''), v)].append(float(c[4]))
        except (ValueError, IndexError): pass
for (piece, v), x in sorted(t.items()):
    if x: print(f"{piece:16s} {v:6s} median of rounds {st.median(x):.4f}  rounds {x}")
try:
    p = json.load(open(sys.argv[2])); print("torch:", {k: round(p[k]["median_ms"], 4) for k in p if isinstance(p[k], dict) and "median_ms" in p[k]})
except Exception as e: print("peer:", e)
PY
