#!/usr/bin/env bash
# Session 9 run a: expert-aligned MoE tile order. Verify (full suite, default = by expert; quick
# suites with groups of 3 and with the old fixed order), then 4 rotated rounds of the prefill
# SwiGLU / down / FFN and plain grouped GEMM: fixed groups of 8 (old) vs by expert (cap 16, cap 8).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-s9a; chmod +x $B
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; cat .carry/lead/commit-s9a; } > $OUT/machine.txt
PREFILL=1512,1091,539,772,779,979,880,964
$B --no-store moe check | tail -1
v() { local tag=$1; shift; env "$@" timeout 300 $B --no-store moe verify --suite ${SUITE:-quick} > $OUT/verify-$tag.txt 2>&1; local rc=$?; echo "verify $tag rc $rc: $(tail -1 $OUT/verify-$tag.txt)"; [ $rc -eq 0 ] || { echo STOP; exit 1; }; }
SUITE=full v full-default
v quick-expert3 KILN_MOE_ORDER=expert KILN_MOE_GROUP=3
v quick-fixed KILN_MOE_ORDER=fixed
: > $OUT/ab.txt
V="fixed8 expert16 expert8"
for round in 1 2 3 4; do
  for v in $V; do
    case $v in fixed8) E="KILN_MOE_ORDER=fixed";; expert16) E="KILN_MOE_ORDER=expert";; expert8) E="KILN_MOE_ORDER=expert KILN_MOE_GROUP=8";; esac
    echo "== $v round $round" >> $OUT/ab.txt
    env $E timeout 120 $B --no-store moe bench --counts $PREFILL --n 3072 --k 4096 --swiglu >> $OUT/ab.txt 2>&1
    env $E timeout 120 $B --no-store moe bench --counts $PREFILL --n 3072 --k 4096 >> $OUT/ab.txt 2>&1
  done
  set -- $V; V="$2 $3 $1"
done
timeout 180 $PY scripts/moe_peer.py --counts $PREFILL --n 3072 --k 4096 --swiglu > $OUT/peer.json 2>&1
python3 - $OUT/ab.txt $OUT/peer.json <<'PY' | tee $OUT/summary.txt
import sys, json, collections, statistics as st
t = collections.defaultdict(list); v = None
for l in open(sys.argv[1]):
    if l.startswith('=='): v = l.split()[1]; continue
    if l.startswith('| ') and ' ms' not in l[:3]:
        c = [x.strip() for x in l.split('|')]
        try: t[(c[1], v)].append(float(c[4]))
        except (ValueError, IndexError): pass
for (piece, v), x in sorted(t.items()):
    print(f"{piece:14s} {v:9s} median of rounds {st.median(x):.4f} ms  rounds {x}")
try:
    p = json.load(open(sys.argv[2])); print("torch:", {k: p[k]["median_ms"] for k in p if isinstance(p[k], dict) and "median_ms" in p[k]})
except Exception as e: print("peer:", e)
PY
