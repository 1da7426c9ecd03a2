#!/usr/bin/env bash
# Session 14 run 5: M=8 ran 21.8 us and M=64 17.1 us on the same 64 CTAs of 64x64 tiles (read
# flush). Where between them does it change? Mx4096x4096 RC for M in 1..64, default dispatch and
# forced cooperative TINY64, binary c.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s14/kiln-c; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: c"; } > $OUT/machine.txt
: > $OUT/runs.jsonl
for m in 1 8 16 24 32 40 48 56 64 96 128; do
  for c in default tiny64; do
    if [ $c = default ]; then E=""; else E="KILN_WGMMA_CFG=$c"; fi
    echo "{\"shape\":\"${m}x4096x4096\",\"cfg\":\"$c\"}" >> $OUT/runs.jsonl
    env $E timeout 60 $B --no-store --json bench --shape ${m}x4096x4096 --reps 30 >> $OUT/runs.jsonl 2>> $OUT/err.txt || echo '{"failed":1}' >> $OUT/runs.jsonl
  done
done
python3 - $OUT/runs.jsonl <<'PY' | tee $OUT/summary.txt
import json, sys
txt = open(sys.argv[1]).read(); dec = json.JSONDecoder(); i = 0; tag = None
while i < len(txt):
    while i < len(txt) and txt[i].isspace(): i += 1
    if i >= len(txt): break
    o, i = dec.raw_decode(txt, i)
    if isinstance(o, dict) and 'cfg' in o: tag = o; continue
    if isinstance(o, dict) and 'failed' in o: print(tag['shape'], tag['cfg'], 'failed'); continue
    r = o[0] if isinstance(o, list) else o
    k = r['versions'][0][0]['median_ms'] * 1e3; v = r['vendor']['median_ms'] * 1e3
    print(f"{tag['shape']:14s} {tag['cfg']:8s} kiln {k:7.2f} us  cublas {v:7.2f} us  ratio {v/k:6.3f}  {r.get('vendor_algorithm','')[:60]}")
PY
