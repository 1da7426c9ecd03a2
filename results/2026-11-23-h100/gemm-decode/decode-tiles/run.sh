#!/usr/bin/env bash
# Session 14 run 3: decode-sized M (read flush). Does a full-M tile with split-K (fewer bytes per
# CTA: (M + BN) x K/S) beat TINY64's 64x64 tiles, whose CTAs each read 64 x K of A and of B?
# Forced configs (KILN_WGMMA_CFG, KILN_WGMMA_SPLITS) against the default, binary b.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s14/kiln-b; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: b"; } > $OUT/machine.txt
$B --no-store peak > $OUT/peak.txt 2>&1
: > $OUT/runs.jsonl
for s in 128x4096x4096 64x4096x4096 8x4096x4096 128x14336x4096 128x4096x14336 128x128256x4096; do
  for c in default tiny64:1 small:1 small:2 small:4 small:8 large:2 large:4 large:8 tiny:2 tiny:4 medium:4; do
    cfg=${c%%:*}; sp=${c##*:}
    if [ $c = default ]; then E=""; else E="KILN_WGMMA_CFG=$cfg KILN_WGMMA_SPLITS=$sp"; fi
    echo "{\"shape\":\"$s\",\"cfg\":\"$c\"}" >> $OUT/runs.jsonl
    env $E timeout 60 $B --no-store --json bench --shape $s --reps 30 >> $OUT/runs.jsonl 2>> $OUT/err.txt || echo '{"failed":1}' >> $OUT/runs.jsonl
  done
done
python3 - $OUT/runs.jsonl <<'PY' | tee $OUT/summary.txt
import json, sys
txt = open(sys.argv[1]).read(); dec = json.JSONDecoder(); i = 0; tag = None; rows = []
while i < len(txt):
    while i < len(txt) and txt[i].isspace(): i += 1
    if i >= len(txt): break
    o, i = dec.raw_decode(txt, i)
    if isinstance(o, dict) and 'cfg' in o: tag = o; continue
    if isinstance(o, dict) and 'failed' in o: rows.append((tag['shape'], tag['cfg'], None, None)); continue
    r = o[0] if isinstance(o, list) else o
    rows.append((tag['shape'], tag['cfg'], r['versions'][0][0]['median_ms'] * 1e3, r['vendor']['median_ms'] * 1e3))
last = None
for s, c, k, v in rows:
    if s != last: print(f"== {s}"); last = s
    print(f"  {c:10s} " + ("failed" if k is None else f"kiln {k:8.2f} us  cublas {v:8.2f} us  ratio {v/k:6.3f}"))
PY
tail -5 $OUT/peak.txt
