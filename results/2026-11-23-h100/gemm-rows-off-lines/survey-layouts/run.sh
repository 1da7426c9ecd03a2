#!/usr/bin/env bash
# Session 15 run 17: the survey's shapes in the other layouts (binary j = b7162f7): LLM
# projections at M 16-4096 and odd squares in CR, RR and CC. One process per problem.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
J=.carry/s15/kiln-j; chmod +x $J
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: j = b7162f7"; } > $OUT/machine.txt
: > $OUT/survey.jsonl
for l in CR RR CC; do
  for s in 16x5120x5120 128x5120x5120 128x11008x4096 1024x5120x5120 1024x11008x4096 1024x4096x11008 4096x13824x5120 4096x50257x768 1000x1000x1000 2048x2048x1000 3000x3000x3000 5000x5000x5000 6000x3000x3000 1000x1000x4000; do
    echo "{\"shape\":\"$s $l\"}" >> $OUT/survey.jsonl
    timeout 60 $J --no-store --json bench --shape $s --layout $l --reps 20 >> $OUT/survey.jsonl 2>> $OUT/err.txt
  done
done
python3 - $OUT/survey.jsonl <<'PY' | tee $OUT/survey.txt
import json, sys, math
txt = open(sys.argv[1]).read(); dec = json.JSONDecoder(); i = 0; tag = None; rows = []
while i < len(txt):
    while i < len(txt) and txt[i].isspace(): i += 1
    if i >= len(txt): break
    o, i = dec.raw_decode(txt, i)
    if isinstance(o, dict) and 'shape' in o: tag = o['shape']; continue
    r = o[0] if isinstance(o, list) else o
    v = r['versions'][0][0]; c = r['vendor']
    rows.append((c['median_ms'] / v['median_ms'], tag, v['version'], v['median_ms'] * 1e3, c['median_ms'] * 1e3))
for ratio, tag, ver, k, c in rows:
    print(f"{tag:22s} {ver:14s} kiln {k:9.2f} us  cublas {c:9.2f} us  ratio {ratio:6.3f}")
print(f"geomean {math.exp(sum(math.log(r[0]) for r in rows) / len(rows)):.3f} over {len(rows)}; lowest:")
for ratio, tag, ver, k, c in sorted(rows)[:8]: print(f"  {tag:22s} {ratio:6.3f}")
PY
