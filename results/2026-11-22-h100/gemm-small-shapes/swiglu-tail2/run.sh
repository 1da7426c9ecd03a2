#!/usr/bin/env bash
# Session 7: the SwiGLU last-wave split timed as the issue's protocol does (moe bench defaults,
# no long warm-up): old binary (4cf8334) vs new vs new with the split off, four rotated rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
OLD=.carry/lead/kiln-s7e; NEW=.carry/lead/kiln-s7f; chmod +x $OLD $NEW
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "old 4cf8334, new = working tree (swiglu tail split)"; } > $OUT/machine.txt
PREFILL=1512,1091,539,772,779,979,880,964
: > $OUT/ab.txt
V="old new new-notail"
for round in 1 2 3 4; do
  for v in $V; do
    case $v in old) B=$OLD; E="";; new) B=$NEW; E="";; new-notail) B=$NEW; E="KILN_SWIGLU_TAIL=0";; esac
    echo "== $v round $round" >> $OUT/ab.txt
    env $E $B --no-store moe bench --counts $PREFILL --n 3072 --k 4096 --swiglu >> $OUT/ab.txt 2>&1
    env $E $B --no-store moe bench --counts $PREFILL --n 3072 --k 4096 --swiglu --interleaved >> $OUT/ab.txt 2>&1
  done
  set -- $V; V="$2 $3 $1"
done
python3 - $OUT/ab.txt <<'PY' | tee $OUT/ab-summary.txt
import sys, re, collections, statistics as st
t = collections.defaultdict(list); v = None
for l in open(sys.argv[1]):
    if l.startswith('=='): v = l.split()[1]; continue
    if l.startswith('| swiglu_dual'):
        c = [x.strip() for x in l.split('|')]
        t[(v, 'interleaved' in c[2])].append(float(c[4]))
for (v, il), x in sorted(t.items()):
    print(f"{v:11s} {'interleaved' if il else 'separate   '} median of rounds {st.median(x):.4f} ms  rounds {x}")
PY
