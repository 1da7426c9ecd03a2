#!/usr/bin/env bash
# Session 8 (k): the split-K partial store / count / add-others of wgmma_tma_ws and swiglu_dual
# are one header (common/split_k.cuh). CUBINs changed (150 of 200 GEMM, all 6 SwiGLU; same
# instruction counts, a few address computations moved to the uniform path). Verify: GEMM full
# suite, quick with split-K 3 forced, quick with stream-K on 5 CTAs; MoE full suite, SwiGLU full
# suite on 8 and 13 CTAs (forces its split). Then old (main 5ff0c82) vs new: SwiGLU prefill (four
# rotated rounds) and GEMM shapes that split (three alternating rounds).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
OLD=.carry/lead/kiln-s8c-head; NEW=.carry/lead/kiln-s8k; chmod +x $OLD $NEW
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "old 710f58b (= 5ff0c82 for split-K and SwiGLU); new = common/split_k.cuh"; } > $OUT/machine.txt
v() { local name=$1; shift; echo "== $name" >> $OUT/verify.txt; timeout 300 "$@" > /tmp/v.txt 2>&1; local rc=$?; tail -8 /tmp/v.txt >> $OUT/verify.txt; echo "verify $name exit $rc: $(tail -1 /tmp/v.txt)"; [ $rc -ne 0 ] && exit 1; }
v gemm-full $NEW --no-store verify --suite full --version wgmma_tma_ws
KILN_WGMMA_SPLITS=3 v gemm-split3 $NEW --no-store verify --suite quick --version wgmma_tma_ws
KILN_WGMMA_SK=1 KILN_WGMMA_GRID=5 v gemm-sk5 $NEW --no-store verify --suite quick --version wgmma_tma_ws
v moe-full $NEW --no-store moe verify --suite full
for g in 8 13; do KILN_SWIGLU_GRID=$g v swiglu-grid$g $NEW --no-store moe verify --suite full --version swiglu_dual; done
PREFILL=1512,1091,539,772,779,979,880,964
: > /tmp/ab.txt
V="old new"
for round in 1 2 3 4; do
  for b in $V; do
    B=$OLD; [ $b = new ] && B=$NEW
    echo "== $b round $round" >> /tmp/ab.txt
    $B --no-store moe bench --counts $PREFILL --n 3072 --k 4096 --swiglu >> /tmp/ab.txt 2>&1
  done
  set -- $V; V="$2 $1"
done
cp /tmp/ab.txt $OUT/swiglu-ab.txt
python3 - /tmp/ab.txt <<'PY' | tee $OUT/summary.txt
import sys, collections, statistics as st
t = collections.defaultdict(list); v = None
for l in open(sys.argv[1]):
    if l.startswith('=='): v = l.split()[1]; continue
    if l.startswith('| swiglu_dual'):
        c = [x.strip() for x in l.split('|')]
        t[v].append(float(c[4]))
for v, x in sorted(t.items()): print(f"swiglu prefill {v:4s} median {st.median(x):.4f} ms  rounds {x}")
PY
: > /tmp/b.jsonl
for run in 1 2 3; do
  for b in $([ $run = 2 ] && echo "new old" || echo "old new"); do
    BIN=$OLD; [ $b = new ] && BIN=$NEW
    for s in 512x128256x4096 256x4096x14336 4096; do
      echo "{\"b\": \"$b\", \"r\": $($BIN --no-store --json bench --shape $s --reps 30 --version wgmma_tma_ws 2>>$OUT/err.txt | tr -d '\n')}" >> /tmp/b.jsonl
    done
  done
done
cp /tmp/b.jsonl $OUT/gemm.jsonl
python3 - /tmp/b.jsonl <<'PY' | tee -a $OUT/summary.txt
import json, sys, collections, statistics as st
t = collections.defaultdict(lambda: collections.defaultdict(list)); order = []
for line in open(sys.argv[1]):
    o = json.loads(line)
    for r in o['r']:
        p = r['problem']; k = f"{p['m']}x{p['n']}x{p['k']}"
        if k not in order: order.append(k)
        t[k][o['b']].append((r['versions'][0][1], r['versions'][0][0]['median_ms']*1e3))
for k in order:
    o, n = t[k]['old'], t[k]['new']
    print(f"gemm {k:18s} old {st.median(x[0] for x in o):.3f} new {st.median(x[0] for x in n):.3f}  time new/old {st.median(x[1] for x in n)/st.median(x[1] for x in o):.3f}   {[round(x[0],3) for x in o]} {[round(x[0],3) for x in n]}")
PY
