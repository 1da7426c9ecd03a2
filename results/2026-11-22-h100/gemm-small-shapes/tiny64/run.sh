#!/usr/bin/env bash
# Session 7: wgmma_tma_ws's 64x64 tile (TINY64: both consumers on one 64-row tile, alternate K
# blocks), chosen for problems that fit one wave of it. (1) full GEMM verify suite with TINY64
# forced everywhere, quick suite with the new heuristic; (2) main (kiln-s7a) vs this binary
# (kiln-s7c) on the shapes whose choice changed, plus controls, three alternating rounds;
# (3) issue 3's target set, RC, this binary, two runs.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
OLD=.carry/lead/kiln-s7a; NEW=.carry/lead/kiln-s7c; chmod +x $OLD $NEW
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "old: 08dd455 (main); new: session 7 working tree (TINY64)"; } > $OUT/machine.txt
KILN_WGMMA_CFG=tiny64 timeout 400 $NEW --no-store verify --suite full --version wgmma_tma_ws > $OUT/verify-full-tiny64.txt 2>&1; echo "verify full tiny64 exit $?" | tee $OUT/verify.txt
tail -3 $OUT/verify-full-tiny64.txt >> $OUT/verify.txt
timeout 300 $NEW --no-store verify --suite quick > $OUT/verify-quick-default.txt 2>&1; echo "verify quick default exit $?" | tee -a $OUT/verify.txt
tail -12 $OUT/verify-quick-default.txt >> $OUT/verify.txt
SHAPES="512x512x512 128x4096x4096 128x4096x14336 64x4096x4096 256x2048x4096 1024x1024x1024 128x14336x4096"
: > $OUT/ab.jsonl
for round in 1 2 3; do for s in $SHAPES; do
  if [ $((round % 2)) = 1 ]; then ORDER="old new"; else ORDER="new old"; fi
  for b in $ORDER; do
    if [ $b = old ]; then BIN=$OLD; else BIN=$NEW; fi
    echo -n "{\"bin\": \"$b\", \"r\": " >> $OUT/ab.jsonl
    $BIN --no-store --json bench --shape $s --version wgmma_tma_ws --reps 50 --warmup-ms 100 2>>$OUT/err.txt | tr -d '\n' >> $OUT/ab.jsonl; echo "}" >> $OUT/ab.jsonl
  done
done; done
python3 - $OUT/ab.jsonl <<'PY' | tee $OUT/ab.txt
import json, sys, collections, statistics as st
t = collections.defaultdict(list); shapes = []
for l in open(sys.argv[1]):
    l = l.strip()
    if not l: continue
    o = json.loads(l)
    for r in o['r']:
        p = r['problem']; key = f"{p['m']}x{p['n']}x{p['k']}"
        if key not in shapes: shapes.append(key)
        v = r['versions'][0]
        t[(key, o['bin'])].append((v[0]['median_ms'] * 1000, v[1]))
print(f"{'shape':16s} {'old us':>8s} {'x cuBLAS':>9s} {'new us':>8s} {'x cuBLAS':>9s} {'new/old time':>12s}")
for s in shapes:
    o = t[(s, 'old')]; n = t[(s, 'new')]
    ou = st.median([a for a, _ in o]); nu = st.median([a for a, _ in n])
    print(f"{s:16s} {ou:8.2f} {st.median([r for _, r in o]):9.3f} {nu:8.2f} {st.median([r for _, r in n]):9.3f} {nu/ou:12.3f}   rounds old {[round(r,3) for _, r in o]} new {[round(r,3) for _, r in n]}")
PY
for run in 1 2; do
  $NEW --no-store --json bench --set targets --layouts RC --reps 30 > $OUT/targets-rc-$run.json 2>>$OUT/err.txt
done
python3 - $OUT <<'PY' | tee $OUT/targets.txt
import json, sys, math, statistics as st, collections
t = collections.defaultdict(list)
for run in (1, 2):
    for r in json.load(open(f"{sys.argv[1]}/targets-rc-{run}.json")):
        p = r['problem']; t[f"{p['m']}x{p['n']}x{p['k']}"].append(r['versions'][0][1])
g = []
for s, v in t.items():
    m = st.median(v); g.append(m)
    print(f"{s:18s} {m:.3f}  {[round(x, 3) for x in v]}")
print(f"geomean {math.exp(sum(map(math.log, g)) / len(g)):.3f}, lowest {min(g):.3f}, under 0.95: {sum(1 for x in g if x < 0.95)}")
PY
