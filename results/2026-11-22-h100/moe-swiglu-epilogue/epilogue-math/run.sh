#!/usr/bin/env bash
# Session 9 run e: SwiGLU epilogue on MUFU approximations (no IEEE division slow path) and X
# loaded only in the 32-row boxes holding valid rows. Full MoE verify of the new binary (grid
# capped at 13 too), then base (HEAD) vs new, four alternating rounds, prefill and 8 x 1024.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
OLD=.carry/lead/kiln-s9e-base; NEW=.carry/lead/kiln-s9e; chmod +x $OLD $NEW
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; cat .carry/lead/commit-s9e; } > $OUT/machine.txt
PREFILL=1512,1091,539,772,779,979,880,964
EVEN=1024,1024,1024,1024,1024,1024,1024,1024
timeout 300 $NEW --no-store moe verify --suite full > $OUT/verify-full.txt 2>&1 || { echo "verify failed"; tail -8 $OUT/verify-full.txt; exit 1; }
KILN_SWIGLU_GRID=13 timeout 300 $NEW --no-store moe verify --suite quick > $OUT/verify-grid13.txt 2>&1 || { echo "verify grid13 failed"; tail -8 $OUT/verify-grid13.txt; exit 1; }
echo "verify: $(tail -1 $OUT/verify-full.txt) / grid 13: $(tail -1 $OUT/verify-grid13.txt)"
: > $OUT/ab.txt
V="base new"
for round in 1 2 3 4; do
  for v in $V; do
    case $v in base) B=$OLD;; new) B=$NEW;; esac
    echo "== $v round $round" >> $OUT/ab.txt
    timeout 120 $B --no-store moe bench --counts $PREFILL --n 3072 --k 4096 --swiglu >> $OUT/ab.txt 2>&1
    timeout 120 $B --no-store moe bench --counts $PREFILL --n 3072 --k 4096 --swiglu --interleaved >> $OUT/ab.txt 2>&1
    echo "== $v-even round $round" >> $OUT/ab.txt
    timeout 120 $B --no-store moe bench --counts $EVEN --n 3072 --k 4096 --swiglu >> $OUT/ab.txt 2>&1
  done
  set -- $V; V="$2 $1"
done
timeout 180 $PY scripts/moe_peer.py --counts $PREFILL --n 3072 --k 4096 --swiglu > $OUT/peer.json 2>&1
python3 - $OUT/ab.txt <<'PY' | tee $OUT/summary.txt
import sys, collections, statistics as st
t = collections.defaultdict(list); v = None
for l in open(sys.argv[1]):
    if l.startswith('=='): v = l.split()[1]; continue
    if l.startswith('| '):
        c = [x.strip() for x in l.split('|')]
        try: t[(c[1] + (' il' if 'interleaved' in c[2] else ''), v)].append(float(c[4]))
        except (ValueError, IndexError): pass
for (piece, v), x in sorted(t.items()):
    if x: print(f"{piece:16s} {v:9s} median of rounds {st.median(x):.4f}  rounds {x}")
PY
grep -o '"swiglu_w1_w3": {[^}]*' $OUT/peer.json | head -c 200; echo
