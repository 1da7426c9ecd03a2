#!/usr/bin/env bash
# Session 13 run 14: issue 3's target set in all four layouts with the session's final binary
# (3a88e02), then the survey's shapes again (survey/ ran f6be432).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
N=.carry/s13/kiln-3a88e02; chmod +x $N
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: 3a88e02"; } > $OUT/machine.txt
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
print(f"all: geomean {math.exp(sum(map(math.log, allg)) / len(allg)):.3f}, under 0.95: {sum(1 for x in allg if x < 0.95)}")
PY
: > $OUT/survey.jsonl
for s in 500 1000 1023 1536 2992 3000 3072 777x1234x999 4095 1x4096x4096 1x14336x4096 8x4096x4096 64x1x4096; do
  for l in RC CC; do
    r=$(timeout 90 $N --no-store bench --shape $s --layout $l --reps 30 --json 2>>$OUT/err.txt)
    echo "{\"shape\":\"$s $l\",\"r\":$r}" >> $OUT/survey.jsonl
  done
done
python3 - $OUT/survey.jsonl <<'PY' | tee $OUT/survey.txt
import json, re, sys
for rec in re.split(r'\n(?=\{"shape")', open(sys.argv[1]).read()):
    d = json.loads(rec); r = d["r"]; r = r[0] if isinstance(r, list) else r
    k, ratio = r["versions"][0]; c = r["vendor"]
    print(f"{d['shape']:20s} {k['version']:13s} kiln {k['median_ms']*1e3:8.2f} us  cublas {c['median_ms']*1e3:8.2f} us  ratio {ratio:.3f}")
PY
