#!/usr/bin/env bash
# Session 7: the final heuristic (single CTAs with the deferred epilogue where rows sit on
# 128-byte lines) in the other three layouts: issue 3's target set in CR, RR, CC, old (4cf8334)
# and new (2a6f836) binaries alternating by layout.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
OLD=.carry/lead/kiln-s7e; NEW=.carry/lead/kiln-s7j; chmod +x $OLD $NEW
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "old 4cf8334, new 2a6f836"; } > $OUT/machine.txt
for l in CR RR CC; do
  for b in new old; do
    if [ $b = old ]; then BIN=$OLD; else BIN=$NEW; fi
    $BIN --no-store --json bench --set targets --layouts $l --reps 20 > $OUT/targets-$b-$l.json 2>>$OUT/err.txt
  done
done
python3 - $OUT <<'PY' | tee $OUT/layouts.txt
import json, sys, math
for l in ('CR', 'RR', 'CC'):
    res = {}
    for b in ('old', 'new'):
        res[b] = {f"{r['problem']['m']}x{r['problem']['n']}x{r['problem']['k']}": r['versions'][0][1] for r in json.load(open(f"{sys.argv[1]}/targets-{b}-{l}.json"))}
    print(f"== {l}")
    for k in res['new']:
        print(f"  {k:18s} old {res['old'][k]:.3f} new {res['new'][k]:.3f}")
    for b in ('old', 'new'):
        g = list(res[b].values())
        print(f"  {b}: geomean {math.exp(sum(map(math.log, g)) / len(g)):.3f}, lowest {min(g):.3f}")
PY
