#!/usr/bin/env bash
# Session 7: wgmma_tma_ws's deferred TMA-store epilogue (KILN_EPI_DEFER: the tile packed to 16-bit
# pairs in registers, one 64-column chunk staged and stored per K block of the next unit, under
# its wgmmas; single CTAs only: pairs keep the old epilogue). (1) verify: full suite (default = deferred),
# quick suite with pairs, split-K (small, 3 slices), last-wave split forced; (2) deferred vs not
# (KILN_WGMMA_DEFER=0, same binary) at the large shapes in single CTAs (KILN_WGMMA_PAIRS=0),
# three alternating rounds. (The first version of this run hung: 48/232 registers for pairs
# exceed the 168 x 384 the launch allocates, so setmaxnreg.inc waited forever.)
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-s7g; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: 7c0d13c + deferred epilogue"; } > $OUT/machine.txt
timeout 240 $B --no-store verify --suite full --version wgmma_tma_ws > $OUT/verify-full.txt 2>&1; rc=$?; echo "verify full exit $rc" | tee $OUT/verify.txt; tail -1 $OUT/verify-full.txt >> $OUT/verify.txt
[ $rc -ne 0 ] && { echo "stopping: full verify failed"; exit 1; }
for e in "KILN_WGMMA_CFG=pair" "KILN_WGMMA_CFG=large" "KILN_WGMMA_CFG=small KILN_WGMMA_SPLITS=3" "KILN_WGMMA_CFG=large KILN_WGMMA_SPLITS=3" "KILN_WGMMA_CFG=tiny KILN_WGMMA_SPLITS=2"; do
  env $e timeout 90 $B --no-store verify --suite quick --version wgmma_tma_ws > $OUT/v.txt 2>&1; echo "verify quick $e exit $?" | tee -a $OUT/verify.txt; tail -1 $OUT/v.txt >> $OUT/verify.txt
done
for sh in 512x128256x4096 2048x2048x2048 1000x3000x700; do
  timeout 60 $B --no-store verify --shape $sh --version wgmma_tma_ws >> $OUT/verify.txt 2>&1; echo "verify $sh exit $?" | tee -a $OUT/verify.txt
done
SHAPES="4096x4096x4096 4096x4096x1024 8192x8192x8192 2048x2048x2048 8192x14336x4096 2048x14336x4096 4000x4000x4000 512x128256x4096"
: > $OUT/ab.jsonl
for round in 1 2 3; do for s in $SHAPES; do
  if [ $((round % 2)) = 1 ]; then ORDER="1 0"; else ORDER="0 1"; fi
  for d in $ORDER; do
    echo -n "{\"defer\": $d, \"r\": " >> $OUT/ab.jsonl
    KILN_WGMMA_PAIRS=0 KILN_WGMMA_DEFER=$d $B --no-store --json bench --shape $s --version wgmma_tma_ws --reps 30 --warmup-ms 100 2>>$OUT/err.txt | tr -d '\n' >> $OUT/ab.jsonl; echo "}" >> $OUT/ab.jsonl
  done
done; done
python3 - $OUT/ab.jsonl <<'PY' | tee $OUT/ab.txt
import json, sys, collections, statistics as st
t = collections.defaultdict(list); shapes = []
for l in open(sys.argv[1]):
    o = json.loads(l); r = o['r'][0]; p = r['problem']; key = f"{p['m']}x{p['n']}x{p['k']}"
    if key not in shapes: shapes.append(key)
    t[(key, o['defer'])].append((r['versions'][0][0]['median_ms'] * 1000, r['versions'][0][1]))
print(f"{'shape':18s} {'store-all us':>12s} {'x cuBLAS':>9s} {'deferred us':>12s} {'x cuBLAS':>9s} {'time d/s':>9s}")
for s in shapes:
    a = t[(s, 0)]; b = t[(s, 1)]
    ua = st.median([x for x, _ in a]); ub = st.median([x for x, _ in b])
    print(f"{s:18s} {ua:12.1f} {st.median([r for _, r in a]):9.3f} {ub:12.1f} {st.median([r for _, r in b]):9.3f} {ub/ua:9.3f}  rounds {[round(r,3) for _, r in a]} {[round(r,3) for _, r in b]}")
PY
