#!/usr/bin/env bash
# Session 8 (m): split-K for the 256-wide tile in layout CR (its bookkeeping spilled before the
# register epilogue became a variant of its own); the heuristic now splits a sparse last wave in
# every layout. Only the 20 CR 128x256 CUBINs changed. Verify (CR full suite; CR quick with
# split 3 forced on the 256-wide tile, single and pairs; tail split on a capped grid), then old
# (main) vs new at the two CR target shapes whose pick changed, and 4096^3 CR as a control.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
OLD=.carry/lead/kiln-s8c-head; NEW=.carry/lead/kiln-s8m; chmod +x $OLD $NEW
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "old 710f58b; new = + CR 128x256 split-K"; } > $OUT/machine.txt
v() { local name=$1; shift; echo "== $name" >> $OUT/verify.txt; timeout 240 "$@" > /tmp/v.txt 2>&1; local rc=$?; tail -6 /tmp/v.txt >> $OUT/verify.txt; echo "verify $name exit $rc: $(tail -1 /tmp/v.txt)"; [ $rc -ne 0 ] && exit 1; }
v full $NEW --no-store verify --suite full --version wgmma_tma_ws
KILN_WGMMA_CFG=large KILN_WGMMA_SPLITS=3 v cr-split3 $NEW --no-store verify --suite quick --layout CR --version wgmma_tma_ws
KILN_WGMMA_CFG=pair KILN_WGMMA_SPLITS=2 v cr-pair-split2 $NEW --no-store verify --suite quick --layout CR --version wgmma_tma_ws
for s in 1000x3000x704 2048x4096x4096 4096x4096x4088; do
  KILN_WGMMA_CFG=large KILN_WGMMA_SPLITS=4 KILN_WGMMA_TAIL=1 KILN_WGMMA_GRID=7 v cr-tail-$s $NEW --no-store verify --shape $s --layout CR --version wgmma_tma_ws
done
: > /tmp/b.jsonl
for run in 1 2 3 4; do
  for b in $([ $((run % 2)) = 0 ] && echo "new old" || echo "old new"); do
    BIN=$OLD; [ $b = new ] && BIN=$NEW
    for s in 512x128256x4096 16384 4096; do
      R=30; [ $s = 16384 ] && R=8
      echo "{\"b\": \"$b\", \"r\": $($BIN --no-store --json bench --shape $s --layout CR --reps $R --version wgmma_tma_ws 2>>$OUT/err.txt | tr -d '\n')}" >> /tmp/b.jsonl
    done
  done
done
cp /tmp/b.jsonl $OUT/bench.jsonl
python3 - /tmp/b.jsonl <<'PY' | tee $OUT/summary.txt
import json, sys, collections, statistics as st
t = collections.defaultdict(lambda: collections.defaultdict(list)); order = []
for line in open(sys.argv[1]):
    o = json.loads(line)
    for r in o['r']:
        p = r['problem']; k = f"{p['m']}x{p['n']}x{p['k']} CR"
        if k not in order: order.append(k)
        t[k][o['b']].append((r['versions'][0][1], r['versions'][0][0]['median_ms']*1e3))
for k in order:
    o, n = t[k]['old'], t[k]['new']
    print(f"{k:22s} old {st.median(x[0] for x in o):.3f} new {st.median(x[0] for x in n):.3f}  time new/old {st.median(x[1] for x in n)/st.median(x[1] for x in o):.3f}   {[round(x[0],3) for x in o]} {[round(x[0],3) for x in n]}")
PY
