#!/usr/bin/env bash
# Session 15 run 14: the session's final binary (i = ce39a45): `kiln peak`, issue 3's target set
# in all four layouts (no target shape takes this session's rules: unit tests), then the
# survey of run 9 again (SURVEY=1).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
I=.carry/s15/kiln-i; chmod +x $I
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: ce39a45"; } > $OUT/machine.txt
if [ "${SURVEY:-0}" = 1 ]; then
  sed "s#E=.carry/s15/kiln-e#E=$I#" results/2026-11-23-h100/session15/survey/run.sh > /tmp/survey.sh
  OUT=$OUT bash /tmp/survey.sh | tail -16
  exit 0
fi
$I --no-store peak > $OUT/peak.txt 2>&1; cat $OUT/peak.txt
$I --no-store --json bench --set targets --layouts RC,CR,RR,CC --reps 30 > $OUT/targets.json 2>>$OUT/err.txt
python3 - $OUT/targets.json <<'PY' | tee $OUT/targets.txt
import json, sys, math, collections
rows = json.load(open(sys.argv[1])); t = collections.defaultdict(dict); order = []
for r in rows:
    p = r['problem']; k = f"{p['m']}x{p['n']}x{p['k']}"
    if k not in order: order.append(k)
    t[p['layout']][k] = r['versions'][0][1]
ls = [l for l in ('RC', 'CR', 'RR', 'CC') if l in t]
print(f"{'shape':18s} " + " ".join(f"{l:>6s}" for l in ls))
for k in order: print(f"{k:18s} " + " ".join(f"{t[l].get(k, float('nan')):6.3f}" for l in ls))
for l in ls:
    g = list(t[l].values())
    print(f"{l}: geomean {math.exp(sum(map(math.log, g)) / len(g)):.3f}, lowest {min(g):.3f}, under 0.95: {sum(1 for x in g if x < 0.95)}")
allg = [x for l in ls for x in t[l].values()]
print(f"all: geomean {math.exp(sum(map(math.log, allg)) / len(allg)):.3f}, under 0.95: {sum(1 for x in allg if x < 0.95)}")
PY
