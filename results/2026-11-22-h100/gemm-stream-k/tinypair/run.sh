#!/usr/bin/env bash
# Session 8 (f): 128x64 tiles in CTA pairs along N multicasting A (TINY_PAIR, as cuBLAS at
# 1024^3). Verify it forced (quick suite; 4 layouts at 1024^3; odd tile counts; f32/beta; split),
# then time it against the default at the small and mid shapes, three alternating rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-s8f; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; cat .carry/lead/commit-s8f; } > $OUT/machine.txt
v() { local name=$1; shift; echo "== $name" >> $OUT/verify.txt; timeout 200 "$@" > /tmp/v.txt 2>&1; local rc=$?; cat /tmp/v.txt >> $OUT/verify.txt; echo "verify $name exit $rc: $(tail -1 /tmp/v.txt)"; [ $rc -ne 0 ] && exit 1; }
export -n KILN_WGMMA_CFG
KILN_WGMMA_CFG=tinypair v quick $B --no-store verify --suite quick --version wgmma_tma_ws
for l in RC CR RR CC; do KILN_WGMMA_CFG=tinypair v 1024-$l $B --no-store verify --shape 1024 --layout $l --version wgmma_tma_ws; done
KILN_WGMMA_CFG=tinypair v odd $B --no-store verify --shape 1000x1000x700 --version wgmma_tma_ws
KILN_WGMMA_CFG=tinypair v oddn $B --no-store verify --shape 256x192x4096 --layout CR --version wgmma_tma_ws
KILN_WGMMA_CFG=tinypair v f32beta $B --no-store verify --shape 1024 --out f32 --beta 0.5 --version wgmma_tma_ws
KILN_WGMMA_CFG=tinypair KILN_WGMMA_SPLITS=3 v split $B --no-store verify --shape 512x1024x4096 --version wgmma_tma_ws
KILN_WGMMA_CFG=tinypair KILN_WGMMA_GRID=5 v grid5 $B --no-store verify --shape 1000x3000x700 --version wgmma_tma_ws
SHAPES="1024 2048 512x4096x4096 512x4096x14336 2048x4096x4096 4096x4096x1024 256x4096x4096 1024x4096x4096"
: > /tmp/b.jsonl
for run in 1 2 3; do
  for b in $([ $run = 2 ] && echo "pair def" || echo "def pair"); do
    E=; [ $b = pair ] && E=KILN_WGMMA_CFG=tinypair
    for s in $SHAPES; do
      echo "{\"b\": \"$b\", \"r\": $(env $E $B --no-store --json bench --shape $s --reps 40 --version wgmma_tma_ws 2>>$OUT/err.txt | tr -d '\n')}" >> /tmp/b.jsonl
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
        p = r['problem']; k = f"{p['m']}x{p['n']}x{p['k']}"
        if k not in order: order.append(k)
        t[k][o['b']].append((r['versions'][0][1], r['versions'][0][0]['median_ms']*1e3))
print(f"{'shape':18s} {'default':>8s} {'pair':>8s}  us default / pair   runs")
for k in order:
    d, q = t[k]['def'], t[k]['pair']
    print(f"{k:18s} {st.median(x[0] for x in d):8.3f} {st.median(x[0] for x in q):8.3f}  {st.median(x[1] for x in d):7.2f} {st.median(x[1] for x in q):7.2f}   {[round(x[0],3) for x in d]} {[round(x[0],3) for x in q]}")
PY
