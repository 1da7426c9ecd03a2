#!/usr/bin/env bash
# Session 9 run h: the SwiGLU launched as moe_tile_prefix's programmatic dependent (PDL).
# Verify (full MoE suite with the defaults, which include a CUDA-graph case; grid capped at 13;
# PDL off), four alternating rounds PDL on/off at prefill (separate and interleaved W), then the
# issue's table with scripts/gpu-moe.sh (full suite first) against torch.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-s9h; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; cat .carry/lead/commit-s9h; } > $OUT/machine.txt
PREFILL=1512,1091,539,772,779,979,880,964
: > $OUT/verify.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; env "$@" timeout 300 $B --no-store moe verify --suite ${SUITE:-quick} >> $OUT/verify.txt 2>&1; local rc=$?; echo "verify $tag rc $rc: $(tail -1 $OUT/verify.txt)"; [ $rc -eq 0 ] || { tail -5 $OUT/verify.txt; echo STOP; exit 1; }; }
SUITE=full v full
v grid13 KILN_SWIGLU_GRID=13
v nopdl KILN_MOE_PDL=0
: > $OUT/ab.txt
V="pdl nopdl"
for round in 1 2 3 4; do
  for v in $V; do
    case $v in pdl) E="KILN_MOE_PDL=1";; nopdl) E="KILN_MOE_PDL=0";; esac
    echo "== $v round $round" >> $OUT/ab.txt
    env $E timeout 120 $B --no-store moe bench --counts $PREFILL --n 3072 --k 4096 --swiglu >> $OUT/ab.txt 2>&1
    env $E timeout 120 $B --no-store moe bench --counts $PREFILL --n 3072 --k 4096 --swiglu --interleaved >> $OUT/ab.txt 2>&1
  done
  set -- $V; V="$2 $1"
done
python3 - $OUT/ab.txt <<'PY' | tee $OUT/ab-summary.txt
import sys, collections, statistics as st
t = collections.defaultdict(list); v = None
for l in open(sys.argv[1]):
    if l.startswith('=='): v = l.split()[1]; continue
    if l.startswith('| '):
        c = [x.strip() for x in l.split('|')]
        try: t[(c[1] + (' il' if 'interleaved' in c[2] else ''), v)].append(float(c[4]))
        except (ValueError, IndexError): pass
for (piece, v), x in sorted(t.items()):
    if x: print(f"{piece:16s} {v:6s} median of rounds {st.median(x):.4f}  rounds {x}")
PY
MOE_SUITE=full MOE_SWEEP=0 KILN_BIN=$B OUT=$OUT/moe bash scripts/gpu-moe.sh > $OUT/gpu-moe.txt 2>&1; echo "gpu-moe rc $?"
tail -12 $OUT/gpu-moe.txt
mv $OUT/moe/results.json $OUT/results.json; rm -rf $OUT/moe
