#!/usr/bin/env bash
# Session 7 final: issue 3's target set, RC, old (4cf8334: TINY64 + promotion) and new (deferred
# epilogue; single CTAs except where rows straddle lines) binaries alternating, two runs each;
# quick verify of the new defaults first.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
OLD=.carry/lead/kiln-s7e; NEW=.carry/lead/kiln-s7i; chmod +x $OLD $NEW
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "old 4cf8334, new = working tree (deferred epilogue, pairs rule)"; } > $OUT/machine.txt
timeout 120 $NEW --no-store verify --suite quick --version wgmma_tma_ws > $OUT/verify-quick.txt 2>&1; rc=$?; echo "verify quick exit $rc"; tail -1 $OUT/verify-quick.txt
[ $rc -ne 0 ] && exit 1
for run in 1 2; do
  for b in new old; do
    if [ $b = old ]; then BIN=$OLD; else BIN=$NEW; fi
    $BIN --no-store --json bench --set targets --layouts RC --reps 30 > $OUT/targets-$b-$run.json 2>>$OUT/err.txt
  done
done
python3 - $OUT <<'PY' | tee $OUT/targets.txt
import json, sys, math, statistics as st, collections
t = collections.defaultdict(lambda: collections.defaultdict(list)); order = []
for b in ('old', 'new'):
    for run in (1, 2):
        for r in json.load(open(f"{sys.argv[1]}/targets-{b}-{run}.json")):
            p = r['problem']; k = f"{p['m']}x{p['n']}x{p['k']}"
            if k not in order: order.append(k)
            t[b][k].append(r['versions'][0][1])
print(f"{'shape':18s} {'old':>6s} {'new':>6s}   runs old / new")
for k in order:
    print(f"{k:18s} {st.median(t['old'][k]):6.3f} {st.median(t['new'][k]):6.3f}   {[round(x,3) for x in t['old'][k]]} {[round(x,3) for x in t['new'][k]]}")
for b in ('old', 'new'):
    g = [st.median(v) for v in t[b].values()]
    print(f"{b}: geomean {math.exp(sum(map(math.log, g)) / len(g)):.3f}, lowest {min(g):.3f}, under 0.95: {sum(1 for x in g if x < 0.95)}")
PY
