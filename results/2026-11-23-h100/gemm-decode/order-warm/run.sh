#!/usr/bin/env bash
# Session 14 run 15: the dips of order/ (a few shapes one or two problems after the heaviest) with
# 300 ms of timed warm-up per problem (--warmup-ms 300), the layouts in the first order (RC, CR, RR,
# CC) as in final/. Binary i (2c2bea3).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s14/kiln-i; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: i (2c2bea3)"; } > $OUT/machine.txt
$B --no-store --json bench --set targets --layouts RC,CR,RR,CC --warmup-ms 300 --reps 30 > $OUT/targets.json 2>>$OUT/err.txt
python3 - $OUT/targets.json <<'PY' | tee $OUT/targets.txt
import json, sys, math, collections
rows = json.load(open(sys.argv[1])); t = collections.defaultdict(dict); order = []; us = {}
for r in rows:
    p = r['problem']; k = f"{p['m']}x{p['n']}x{p['k']}"
    if k not in order: order.append(k)
    t[p['layout']][k] = r['versions'][0][1]; us[(p['layout'], k)] = (r['versions'][0][0]['median_ms'] * 1e3, r['vendor']['median_ms'] * 1e3)
ls = [l for l in ('RC', 'CR', 'RR', 'CC') if l in t]
print(f"{'shape':18s} " + " ".join(f"{l:>6s}" for l in ls))
for k in order: print(f"{k:18s} " + " ".join(f"{t[l].get(k, float('nan')):6.3f}" for l in ls))
for l in ls:
    g = list(t[l].values())
    print(f"{l}: geomean {math.exp(sum(map(math.log, g)) / len(g)):.3f}, lowest {min(g):.3f}, under 0.95: {sum(1 for x in g if x < 0.95)}")
allg = [x for l in ls for x in t[l].values()]
print(f"all: geomean {math.exp(sum(map(math.log, allg)) / len(allg)):.3f}, under 0.95: {sum(1 for x in allg if x < 0.95)}")
for key in [('CR', '512x512x512'), ('RC', '128x4096x4096')]: print(key, 'kiln %.2f us, cublas %.2f us' % us[key])
PY
