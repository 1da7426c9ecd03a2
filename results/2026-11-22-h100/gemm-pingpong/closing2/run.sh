#!/usr/bin/env bash
# Session 12 run 14 (closing): main with the 64x64 ping-pong tile taken where the heuristic ran
# TINY64 (6c6796b) against 959c830: full suite, quick suite on 3 resident CTAs; three rotated
# rounds at the shapes the change moves (4096^3 and 1024^3 as controls); then issue 3's target
# set in all four layouts, one run.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
O=.carry/s12/kiln-final; N=.carry/s12/kiln-final2; chmod +x $O $N
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "old: $(cat .carry/s12/commit-final); new: $(cat .carry/s12/commit-final2)"; } > $OUT/machine.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; env "$@" timeout 300 $N --no-store verify --version wgmma_tma_ws "${VA[@]}" >> $OUT/verify.txt 2>&1; local rc=$?; echo "verify $tag rc $rc: $(tail -1 $OUT/verify.txt)"; [ $rc -eq 0 ] || { echo STOP; tail -30 $OUT/verify.txt; exit 1; }; }
VA=(--suite full); v full X=1
VA=(--suite quick); v grid3 KILN_WGMMA_GRID=3
: > $OUT/ab.jsonl
CASES="512x512x512:RC:bf16 512x512x512:CR:bf16 512x512x512:RR:bf16 512x512x512:CC:bf16 128x4096x4096:RC:bf16 128x4096x4096:CR:bf16 128x4096x4096:CC:bf16 128x4096x14336:RC:bf16 64x4096x4096:RC:bf16 1024x1024x1024:RC:bf16 4096x4096x4096:RC:bf16"
V="old new"
for round in 1 2 3; do
  for c in $CASES; do
    IFS=: read s l o <<< "$c"
    for v in $V; do
      B=$O; [ $v = new ] && B=$N
      r=$(timeout 90 $B --no-store bench --shape $s --layout $l --out $o --reps 40 --json 2>>$OUT/err.txt)
      echo "{\"shape\":\"$s $l $o\",\"v\":\"$v\",\"round\":$round,\"r\":$r}" >> $OUT/ab.jsonl
    done
  done
  V="${V#* } ${V%% *}"
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
