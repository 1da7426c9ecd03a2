#!/usr/bin/env bash
# Session 14 run 12: 512^3 CR runs 7.6 us where RC, RR and CC run 6.3-6.5 (final/). Is it every
# tile config, or one? Forced configs in all four layouts at 512^3 and 1024^3, binary h.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s14/kiln-h; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: h (2a191cb)"; } > $OUT/machine.txt
: > $OUT/runs.jsonl
for s in 512x512x512 1024x1024x1024; do
  for l in RC CR RR CC; do
    for c in default pingpong-tiny tiny64 pingpong64 tiny; do
      if [ $c = default ]; then E=""; else E="KILN_WGMMA_CFG=$c"; fi
      echo "{\"shape\":\"$s $l\",\"cfg\":\"$c\"}" >> $OUT/runs.jsonl
      env $E timeout 60 $B --no-store --json bench --shape $s --layout $l --reps 50 >> $OUT/runs.jsonl 2>> $OUT/err.txt || echo '{"failed":1}' >> $OUT/runs.jsonl
    done
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
    print(f"{tag['shape']:20s} {tag['cfg']:14s} kiln {k:7.2f} us  cublas {v:7.2f} us  ratio {v/k:6.3f}")
PY
