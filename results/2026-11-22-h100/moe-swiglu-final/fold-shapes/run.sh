#!/usr/bin/env bash
# Session 10 run 9: is the fold (KILN_SWIGLU_FOLD=32, the default) safe away from prefill? fold 0
# vs 32 at three other ragged SwiGLU shapes (N 3072, K 4096), three alternating rounds, same binary.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s10/kiln-h; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; cat .carry/s10/commit-h; } > $OUT/machine.txt
S1=520,130,700,260,390,600,150,900
S2=2000,1100,1300,1700,1500,900,1200,1000
S3=$(python3 -c "print(','.join(str(129 + (7 * i) % 32) for i in range(64)))")
echo "S3=$S3" >> $OUT/machine.txt
timeout 200 $B --no-store moe verify --suite quick > $OUT/verify.txt 2>&1; echo "verify rc $? $(tail -1 $OUT/verify.txt)"
: > $OUT/ab.txt
V="f0 f32"
for round in 1 2 3; do
  for v in $V; do
    case $v in f0) M=0;; f32) M=32;; esac
    for s in S1 S2 S3; do
      echo "== $v $s round $round" >> $OUT/ab.txt
      KILN_SWIGLU_FOLD=$M timeout 120 $B --no-store moe bench --counts ${!s} --n 3072 --k 4096 --swiglu >> $OUT/ab.txt 2>&1
    done
  done
  set -- $V; V="$2 $1"
done
python3 - $OUT/ab.txt <<'PY' | tee $OUT/summary.txt
import sys, collections, statistics as st
t = collections.defaultdict(list); key = None
for l in open(sys.argv[1]):
    if l.startswith('=='): key = tuple(l.split()[1:3]); continue
    if l.startswith('| ') and 'swiglu_dual' in l:
        c = [x.strip() for x in l.split('|')]
        try: t[key].append(float(c[4]))
        except (ValueError, IndexError): pass
for s in ['S1', 'S2', 'S3']:
    a, b = t.get(('f0', s), []), t.get(('f32', s), [])
    if a and b: print(f"{s}: fold 0 {st.median(a):.4f} ms, fold 32 {st.median(b):.4f} ms ({100*(st.median(b)/st.median(a)-1):+.1f} %)  {a} {b}")
PY
