#!/usr/bin/env bash
# Session 15 run 12: M = 128 at N = 5120-8192, where 64x64 tiles need two waves and the split-K
# cost model picks split 128x128 tiles (binary h = edb418e): default against forced 128x64
# cooperative (tiny) and 128x64 ping-pong (pingpong64), rotated, two rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
H=.carry/s15/kiln-h; chmod +x $H
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: h = edb418e"; } > $OUT/machine.txt
: > $OUT/ab.jsonl
for s in 128x5120x2048 128x5120x5120 128x5120x8192 128x5120x13824 128x6144x6144 128x8192x2048 128x8192x8192 128x8192x28672 96x5120x5120 128x4608x4096; do
  for cfg in default tiny pingpong64 pingpong64 tiny default; do
    [ $cfg = default ] && E2="" || E2="KILN_WGMMA_CFG=$cfg"
    echo "{\"bin\":\"$cfg\",\"shape\":\"$s RC\"}" >> $OUT/ab.jsonl
    timeout 60 env KILN_X=0 $E2 $H --no-store --json bench --shape $s --reps 30 >> $OUT/ab.jsonl 2>> $OUT/err.txt
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
