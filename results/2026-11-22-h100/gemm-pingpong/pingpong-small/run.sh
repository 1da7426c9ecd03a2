#!/usr/bin/env bash
# Session 12 run 8: ping-pong also where the heuristic picked one unsplit wave of 128x128 tiles
# (de46203) against the first rule alone (9e37ce0): full suite; three rotated rounds at the
# shapes the new rule changes (and 4096^3 as a control); ping-pong forced against the default
# with f32 C (the register epilogue, which the rule leaves out); then issue 3's target set in all
# four layouts, one run.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
O=.carry/s12/kiln-new; N=.carry/s12/kiln-new2; chmod +x $O $N
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "old: $(cat .carry/s12/commit-new); new: $(cat .carry/s12/commit-new2)"; } > $OUT/machine.txt
timeout 300 $N --no-store verify --suite full --version wgmma_tma_ws > $OUT/verify.txt 2>&1; rc=$?; echo "verify exit $rc: $(tail -1 $OUT/verify.txt)"; [ $rc -ne 0 ] && exit 1
: > $OUT/ab.jsonl
CASES="512x4096x4096:RC 512x4096x4096:CR 512x4096x4096:RR 512x4096x4096:CC 512x4096x14336:RC 512x4096x14336:CR 512x4096x14336:RR 512x4096x14336:CC 128x14336x4096:RC 128x14336x4096:CC 512x4096x1024:RC 384x4096x4096:RC 1024x2048x4096:RC 256x8192x4096:RC 4096x4096x4096:RC"
V="old new"
for round in 1 2 3; do
  for c in $CASES; do
    s=${c%:*}; l=${c#*:}
    for v in $V; do
      B=$O; [ $v = new ] && B=$N
      r=$(timeout 90 $B --no-store bench --shape $s --layout $l --reps 40 --json 2>>$OUT/err.txt)
      echo "{\"shape\":\"$s $l\",\"v\":\"$v\",\"round\":$round,\"r\":$r}" >> $OUT/ab.jsonl
    done
  done
  V="${V#* } ${V%% *}"
done
for round in 1 2; do
  for s in 512x4096x4096 2048x2048x2048; do
    for v in coop pp; do
      E=X=1; [ $v = pp ] && E=KILN_WGMMA_CFG=pingpong
      r=$(env $E timeout 90 $N --no-store bench --shape $s --out f32 --reps 40 --json 2>>$OUT/err.txt)
      echo "{\"shape\":\"$s f32\",\"v\":\"$v\",\"round\":$round,\"r\":$r}" >> $OUT/ab.jsonl
    done
  done
done
python3 .carry/s12/parse_ab.py $OUT/ab.jsonl | tee $OUT/summary.txt
$N --no-store --json bench --set targets --layouts RC,CR,RR,CC --reps 30 > $OUT/targets.json 2>>$OUT/err.txt
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
print(f"all: geomean {math.exp(sum(map(math.log, allg)) / len(allg)):.3f}")
PY
