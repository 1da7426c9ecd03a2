#!/usr/bin/env bash
# Session 14 run 13: in both target-set runs (select/, final/) 512^3 CR read 0.87x (7.6 us) and
# 128x4096x4096 RC 0.946x (18.2 us), where alone they run 6.4 and 17.4 us (cr512/, abox/). An
# effect of their place in the run? The set with the layouts in the other order (CR first), binary h.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s14/kiln-h; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: h (2a191cb)"; } > $OUT/machine.txt
$B --no-store --json bench --set targets --layouts CR,RC --reps 30 > $OUT/targets.json 2>>$OUT/err.txt
python3 - $OUT/targets.json <<'PY' | tee $OUT/targets.txt
import json, sys, math, collections
rows = json.load(open(sys.argv[1])); t = collections.defaultdict(dict); order = []; us = {}
for r in rows:
    p = r['problem']; k = f"{p['m']}x{p['n']}x{p['k']}"
    if k not in order: order.append(k)
    t[p['layout']][k] = r['versions'][0][1]; us[(p['layout'], k)] = (r['versions'][0][0]['median_ms'] * 1e3, r['vendor']['median_ms'] * 1e3)
ls = [l for l in ('RC', 'CR') if l in t]
print(f"{'shape':18s} " + " ".join(f"{l:>6s}" for l in ls))
for k in order: print(f"{k:18s} " + " ".join(f"{t[l].get(k, float('nan')):6.3f}" for l in ls))
for l in ls:
    g = list(t[l].values())
    print(f"{l}: geomean {math.exp(sum(map(math.log, g)) / len(g)):.3f}, lowest {min(g):.3f}, under 0.95: {sum(1 for x in g if x < 0.95)}")
for key in [('CR', '512x512x512'), ('RC', '128x4096x4096')]: print(key, 'kiln %.2f us, cublas %.2f us' % us[key])
PY
