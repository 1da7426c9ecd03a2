#!/usr/bin/env bash
# Session 15 run 6: rows off lines beyond 3000^3 (binary b): 6000x3000x3000 ran 0.67x with the
# 128x256 pair. Every multi-tile config forced there and at neighbours, two rounds each.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s15/kiln-b; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: b = 5045141"; } > $OUT/machine.txt
: > $OUT/ab.jsonl
for s in 6000x3000x3000 3000x6000x3000 6000x6000x3000 4000x4000x4000 4096x4096x4088 2000x2000x2000 6000x6000x6000; do
  for cfg in default pair medium-pair medium large default pair medium-pair medium large; do
    [ $cfg = default ] && E="" || E="KILN_WGMMA_CFG=$cfg"
    echo "{\"bin\":\"$cfg\",\"shape\":\"$s RC\"}" >> $OUT/ab.jsonl
    env $E $B --no-store --json bench --shape $s --reps 20 >> $OUT/ab.jsonl 2>> $OUT/err.txt
  done
done
python3 - $OUT/ab.jsonl <<'PY' | tee $OUT/ab.txt
import json, sys, collections, statistics as st
txt = open(sys.argv[1]).read(); dec = json.JSONDecoder(); i = 0; tag = None
res = collections.defaultdict(list)
while i < len(txt):
    while i < len(txt) and txt[i].isspace(): i += 1
    if i >= len(txt): break
    o, i = dec.raw_decode(txt, i)
    if isinstance(o, dict) and 'bin' in o: tag = (o['shape'], o['bin']); continue
    r = o[0] if isinstance(o, list) else o
    res[tag + ('kiln',)].append(r['versions'][0][0]['median_ms'] * 1e3)
    res[tag + ('cublas',)].append(r['vendor']['median_ms'] * 1e3)
print(f"{'shape':20s} {'config':12s} {'kiln us':>8s} {'cublas us':>9s} {'ratio':>6s}")
for (s, b) in dict.fromkeys(k[:2] for k in res):
    k, c = st.median(res[(s, b, 'kiln')]), st.median(res[(s, b, 'cublas')])
    print(f"{s:20s} {b:12s} {k:8.2f} {c:9.2f} {c/k:6.3f}")
PY
