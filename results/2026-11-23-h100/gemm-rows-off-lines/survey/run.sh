#!/usr/bin/env bash
# Session 15 run 9: a survey of the default dispatch (binary e = 5aa934d) outside issue 3's set:
# LLM projections (hidden 768-8192, vocabularies 32000-151936) at decode and prefill M, and odd
# squares. RC (x @ W^T with W stored N x K) unless named. One process per problem.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
E=.carry/s15/kiln-e; chmod +x $E
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: e = 5aa934d"; } > $OUT/machine.txt
: > $OUT/survey.jsonl
for m in 1 16 128 1024 4096; do
  for nk in 50257x768 32000x4096 151936x3584 5120x5120 13824x5120 5120x13824 11008x4096 4096x11008 28672x8192 8192x28672 3584x18944; do
    echo "{\"shape\":\"${m}x$nk RC\"}" >> $OUT/survey.jsonl
    timeout 60 $E --no-store --json bench --shape ${m}x$nk --reps 20 >> $OUT/survey.jsonl 2>> $OUT/err.txt
  done
done
for s in 1000 1500 2000 2500 3500 5000 1000x1000x4000 2048x2048x1000; do
  for l in RC CR; do
    echo "{\"shape\":\"$s $l\"}" >> $OUT/survey.jsonl
    timeout 60 $E --no-store --json bench --shape $s --layout $l --reps 20 >> $OUT/survey.jsonl 2>> $OUT/err.txt
  done
done
python3 - $OUT/survey.jsonl <<'PY' | tee $OUT/survey.txt
import json, sys
txt = open(sys.argv[1]).read(); dec = json.JSONDecoder(); i = 0; tag = None; rows = []
while i < len(txt):
    while i < len(txt) and txt[i].isspace(): i += 1
    if i >= len(txt): break
    o, i = dec.raw_decode(txt, i)
    if isinstance(o, dict) and 'shape' in o: tag = o['shape']; continue
    r = o[0] if isinstance(o, list) else o
    v = r['versions'][0][0]; c = r['vendor']
    rows.append((c['median_ms'] / v['median_ms'], tag, v['version'], v['median_ms'] * 1e3, c['median_ms'] * 1e3, v['tflops']))
for ratio, tag, ver, k, c, tf in rows:
    print(f"{tag:22s} {ver:14s} kiln {k:9.2f} us  cublas {c:9.2f} us  ratio {ratio:6.3f}  {tf:6.1f} TF")
print("lowest:")
for ratio, tag, ver, k, c, tf in sorted(rows)[:12]:
    print(f"{tag:22s} {ver:14s} ratio {ratio:6.3f}")
import math
print(f"geomean {math.exp(sum(math.log(r[0]) for r in rows) / len(rows)):.3f} over {len(rows)}")
PY
