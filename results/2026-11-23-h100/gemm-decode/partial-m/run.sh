#!/usr/bin/env bash
# Session 14 run 7: M between 64 and 128 runs 64-row tiles whose second row tile lies partly
# past M, zero-filled by TMA, which costs (abox/). Would one 128-row tile, whose A box is now
# trimmed to M, do better? Forced 128-row configs against the default at Mx4096x4096, binary d.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s14/kiln-d; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: d"; } > $OUT/machine.txt
: > $OUT/runs.jsonl
for m in 80 96 100 120 72; do
  for c in default tiny pingpong64 small pingpong; do
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
