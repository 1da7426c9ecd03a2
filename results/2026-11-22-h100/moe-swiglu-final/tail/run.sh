#!/usr/bin/env bash
# Session 10 run 5: the SwiGLU's last-wave slices: 2 (default: one unit per CTA), 3 and 4 slices
# per tail tile (KILN_SWIGLU_TAIL_FILL=2, KILN_SWIGLU_TAIL=3 / 4) and no split (TAIL=1), same
# binary. Quick verify with fill 2 (grid 13 too), then four rotated rounds at prefill; torch once.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s10/kiln-d; chmod +x $B
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; cat .carry/s10/commit-d; } > $OUT/machine.txt
PREFILL=1512,1091,539,772,779,979,880,964
: > $OUT/verify.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; env "$@" timeout 300 $B --no-store moe verify --suite ${SUITE:-quick} >> $OUT/verify.txt 2>&1; local rc=$?; echo "verify $tag rc $rc: $(tail -1 $OUT/verify.txt)"; [ $rc -eq 0 ] || { tail -8 $OUT/verify.txt; echo STOP; exit 1; }; }
v quick-fill2 KILN_SWIGLU_TAIL_FILL=2
v grid13-fill2 KILN_SWIGLU_TAIL_FILL=2 KILN_SWIGLU_GRID=13
v grid8-fill4 KILN_SWIGLU_TAIL_FILL=4 KILN_SWIGLU_GRID=8
: > $OUT/ab.txt
V="s2 s3 s4 s1"
for round in 1 2 3 4; do
  for v in $V; do
    case $v in s2) E="KILN_SWIGLU_TAIL_FILL=1";; s3) E="KILN_SWIGLU_TAIL_FILL=2 KILN_SWIGLU_TAIL=3";; s4) E="KILN_SWIGLU_TAIL_FILL=2";; s1) E="KILN_SWIGLU_TAIL=1";; esac
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
        try: t[(c[1] + (' il' if 'interleaved' in c[2] else ''), v)].append(float(c[4]))
        except (ValueError, IndexError): pass
for (piece, v), x in sorted(t.items()):
    if x and piece.startswith('swiglu'): print(f"{piece:16s} {v:6s} median of rounds {st.median(x):.4f}  rounds {x}")
try:
    p = json.load(open(sys.argv[2])); print("torch:", {k: round(p[k]["median_ms"], 4) for k in p if isinstance(p[k], dict) and "median_ms" in p[k]})
except Exception as e: print("peer:", e)
PY
