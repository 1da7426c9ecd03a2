#!/usr/bin/env bash
# Session 9 run g: SwiGLU units handed out dynamically (global counter) vs statically, with the
# deferred stores. Full MoE verify (dynamic; grid capped at 13 and 8 too; static on 13), then four
# rotated rounds at prefill: dynamic / static / dynamic without deferred stores / dynamic without
# the last-wave split; and torch.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-s9g; chmod +x $B
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; cat .carry/lead/commit-s9g; } > $OUT/machine.txt
PREFILL=1512,1091,539,772,779,979,880,964
v() { local tag=$1; shift; env "$@" timeout 300 $B --no-store moe verify --suite ${SUITE:-quick} > $OUT/verify-$tag.txt 2>&1; local rc=$?; echo "verify $tag rc $rc: $(tail -1 $OUT/verify-$tag.txt)"; [ $rc -eq 0 ] || { tail -5 $OUT/verify-$tag.txt; echo STOP; exit 1; }; }
SUITE=full v full
v grid13 KILN_SWIGLU_GRID=13
v grid8 KILN_SWIGLU_GRID=8 KILN_MOE_ORDER=expert KILN_MOE_GROUP=3
v static-grid13 KILN_SWIGLU_DYNAMIC=0 KILN_SWIGLU_GRID=13
: > $OUT/ab.txt
V="dyn static nodefer-dyn notail-dyn"
for round in 1 2 3 4; do
  for v in $V; do
    case $v in dyn) E="KILN_SWIGLU_DYNAMIC=1";; static) E="KILN_SWIGLU_DYNAMIC=0";; nodefer-dyn) E="KILN_SWIGLU_DEFER=0";; notail-dyn) E="KILN_SWIGLU_TAIL=1";; esac
    echo "== $v round $round" >> $OUT/ab.txt
    env $E timeout 120 $B --no-store moe bench --counts $PREFILL --n 3072 --k 4096 --swiglu >> $OUT/ab.txt 2>&1
  done
  set -- $V; V="$2 $3 $4 $1"
done
timeout 180 $PY scripts/moe_peer.py --counts $PREFILL --n 3072 --k 4096 --swiglu > $OUT/peer.json 2>&1
python3 - $OUT/ab.txt $OUT/peer.json <<'PY' | tee $OUT/summary.txt
import sys, json, collections, statistics as st
t = collections.defaultdict(list); v = None
for l in open(sys.argv[1]):
    if l.startswith('=='): v = l.split()[1]; continue
    if l.startswith('| '):
        c = [x.strip() for x in l.split('|')]
        try: t[(c[1], v)].append(float(c[4]))
        except (ValueError, IndexError): pass
for (piece, v), x in sorted(t.items()):
    if x: print(f"{piece:14s} {v:8s} median of rounds {st.median(x):.4f}  rounds {x}")
try:
    p = json.load(open(sys.argv[2])); print("torch:", {k: round(p[k]["median_ms"], 4) for k in p if isinstance(p[k], dict) and "median_ms" in p[k]})
except Exception as e: print("peer:", e)
PY
