#!/usr/bin/env bash
# Session 8 (b): stream-K head-first order.: stream-K + separate register-epilogue variants. Verify (defaults; stream-K forced
# on a capped grid so small shapes run several waves; stream-K on large shapes), then the target
# set RC: old binary (s7k, HEAD 2434ab5), new with stream-K off, new with stream-K on.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
OLD=.carry/lead/kiln-s7k; NEW=.carry/lead/kiln-s8b; chmod +x $OLD $NEW
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; cat .carry/lead/commit-s8b; } > $OUT/machine.txt
v() { local name=$1; shift; echo "== $name" >> $OUT/verify.txt; timeout 240 "$@" > /tmp/v.txt 2>&1; local rc=$?; cat /tmp/v.txt >> $OUT/verify.txt; echo "verify $name exit $rc: $(tail -1 /tmp/v.txt)"; [ $rc -ne 0 ] && exit 1; }
KILN_WGMMA_SK=1 KILN_WGMMA_GRID=5 v sk-grid5 $NEW --no-store verify --suite full --version wgmma_tma_ws
for s in 4096 4000 2048x14336x4096 4096x4096x4088; do
  KILN_WGMMA_SK=1 KILN_WGMMA_PAIRS=0 v sk-$s $NEW --no-store verify --shape $s --version wgmma_tma_ws
done
KILN_WGMMA_SK=1 v sk-4096-CR $NEW --no-store verify --shape 4096 --layout CR --version wgmma_tma_ws
KILN_WGMMA_SK=1 v sk-4096-f32-beta $NEW --no-store verify --shape 4096 --out f32 --beta 0.5 --version wgmma_tma_ws
mkdir -p /tmp/tj
for run in 1 2; do
  for b in $([ $run = 1 ] && echo "sk old nosk" || echo "nosk sk old"); do
    case $b in old) BIN=$OLD; E=;; nosk) BIN=$NEW; E=KILN_WGMMA_SK=0;; sk) BIN=$NEW; E=KILN_WGMMA_SK=1;; esac
    env $E $BIN --no-store --json bench --set targets --layouts RC --reps 30 > /tmp/tj/targets-$b-$run.json 2>>$OUT/err.txt
    echo "bench $b $run done"
  done
done
python3 - $OUT <<'PY' | tee $OUT/targets.txt
import json, sys, math, statistics as st, collections, glob, os
t = collections.defaultdict(lambda: collections.defaultdict(list)); order = []
for f in sorted(glob.glob(f"/tmp/tj/targets-*.json")):
    b = os.path.basename(f).split('-')[1]
    for r in json.load(open(f)):
        p = r['problem']; k = f"{p['m']}x{p['n']}x{p['k']}"
        if k not in order: order.append(k)
        t[b][k].append((r['versions'][0][1], r['vendor']['median_ms']*1e3))
bs = [b for b in ('old', 'nosk', 'sk') if b in t]
print(f"{'shape':18s} " + " ".join(f"{b:>6s}" for b in bs) + "   cuBLAS us")
for k in order:
    print(f"{k:18s} " + " ".join(f"{st.median(x[0] for x in t[b][k]):6.3f}" for b in bs) + "   " + " ".join(f"{st.median(x[1] for x in t[b][k]):.1f}" for b in bs))
for b in bs:
    g = [st.median(x[0] for x in v) for v in t[b].values()]
    print(f"{b}: geomean {math.exp(sum(map(math.log, g)) / len(g)):.3f}, lowest {min(g):.3f}, under 0.95: {sum(1 for x in g if x < 0.95)}")
PY
tar czf $OUT/targets-json.tgz -C /tmp/tj .
