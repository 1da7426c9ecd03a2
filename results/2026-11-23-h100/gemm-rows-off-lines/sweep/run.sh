#!/usr/bin/env bash
# Session 15 run 10: the survey's weak shapes (binary e) under every tile config, with split-K
# and stream-K where they apply, one round each: does any config beat the heuristic's pick?
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
E=.carry/s15/kiln-e; chmod +x $E
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: e = 5aa934d"; } > $OUT/machine.txt
touch $OUT/sweep.jsonl
for s in ${SHAPES:-1024x5120x5120 1024x5120x13824 128x5120x5120 1024x11008x4096 1024x3584x18944 2048x2048x1000 1000x1000x4000 1000x1000x1000}; do
  for cfg in default large medium small tiny tiny64 pingpong pingpong64 pair medium-pair large:sk medium:sk small:sk large:t2 large:t3 medium:t2 small:s2 small:s3 tiny:s2 tiny:s4; do
    c=${cfg%%:*}; x=${cfg#*:}; [ "$x" = "$cfg" ] && x=""
    E2=""; [ $c != default ] && E2="KILN_WGMMA_CFG=$c"
    case $x in sk) E2="$E2 KILN_WGMMA_SK=1";; t2) E2="$E2 KILN_WGMMA_SPLITS=2 KILN_WGMMA_TAIL=1";; t3) E2="$E2 KILN_WGMMA_SPLITS=3 KILN_WGMMA_TAIL=1";; s2) E2="$E2 KILN_WGMMA_SPLITS=2 KILN_WGMMA_TAIL=0";; s3) E2="$E2 KILN_WGMMA_SPLITS=3 KILN_WGMMA_TAIL=0";; s4) E2="$E2 KILN_WGMMA_SPLITS=4 KILN_WGMMA_TAIL=0";; esac
    echo "{\"cfg\":\"$cfg\",\"shape\":\"$s RC\"}" >> $OUT/sweep.jsonl
    timeout 60 env KILN_X=0 $E2 $E --no-store --json bench --shape $s --reps 20 >> $OUT/sweep.jsonl 2>> $OUT/err.txt
  done
done
python3 - $OUT/sweep.jsonl <<'PY' | tee $OUT/sweep.txt
import json, sys, collections
txt = open(sys.argv[1]).read(); dec = json.JSONDecoder(); i = 0; tag = None
res = collections.defaultdict(dict)
while i < len(txt):
    while i < len(txt) and txt[i].isspace(): i += 1
    if i >= len(txt): break
    o, i = dec.raw_decode(txt, i)
    if isinstance(o, dict) and 'cfg' in o: tag = (o['shape'], o['cfg']); continue
    r = o[0] if isinstance(o, list) else o
    res[tag[0]][tag[1]] = (r['versions'][0][0]['median_ms'] * 1e3, r['vendor']['median_ms'] * 1e3)
for s, d in res.items():
    dflt = d.get('default', (float('nan'), float('nan')))
    best = sorted(d.items(), key=lambda kv: kv[1][0])[:4]
    print(f"{s:20s} default {dflt[0]:8.2f} us (x{dflt[1]/dflt[0]:.3f})  best: " + ", ".join(f"{k} {v[0]:.2f} (x{v[1]/v[0]:.3f})" for k, v in best))
PY
