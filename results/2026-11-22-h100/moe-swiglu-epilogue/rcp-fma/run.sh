#!/usr/bin/env bash
# Session 9 run j: the SwiGLU epilogue's reciprocal by Newton steps on the FMA pipe (one MUFU op
# per element) vs MUFU rcp (KILN_SWIGLU_RCP=mufu), same binary. Full MoE verify (both), four
# alternating rounds at prefill, then the issue's table (scripts/gpu-moe.sh, full suite first).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-s9j; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; cat .carry/lead/commit-s9j; } > $OUT/machine.txt
PREFILL=1512,1091,539,772,779,979,880,964
: > $OUT/verify.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; env "$@" timeout 300 $B --no-store moe verify --suite ${SUITE:-quick} >> $OUT/verify.txt 2>&1; local rc=$?; echo "verify $tag rc $rc: $(tail -1 $OUT/verify.txt)"; [ $rc -eq 0 ] || { tail -5 $OUT/verify.txt; echo STOP; exit 1; }; }
SUITE=full v full-fma
SUITE=full v full-mufu KILN_SWIGLU_RCP=mufu
: > $OUT/ab.txt
V="fma mufu"
for round in 1 2 3 4; do
  for v in $V; do
    case $v in fma) E="KILN_SWIGLU_RCP=fma";; mufu) E="KILN_SWIGLU_RCP=mufu";; esac
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
    if x: print(f"{piece:16s} {v:5s} median of rounds {st.median(x):.4f}  rounds {x}")
PY
MOE_SUITE=full MOE_SWEEP=0 KILN_BIN=$B OUT=$OUT/moe bash scripts/gpu-moe.sh > $OUT/gpu-moe.txt 2>&1; echo "gpu-moe rc $?"
tail -11 $OUT/gpu-moe.txt
mv $OUT/moe/results.json $OUT/results.json; rm -rf $OUT/moe
