#!/usr/bin/env bash
# Session 13 run 5: the default dispatch outside issue 3's shape set: odd sizes (rows off
# 128-byte lines, leading dimensions TMA cannot take) and decode-sized M (1-64), RC, bf16.
# Main f6be432. Which version the dispatcher runs, its time and cuBLAS's, in one process each.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s13/kiln-f6be432; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: $(cat .carry/s13/commit-f6)"; } > $OUT/machine.txt
: > $OUT/survey.jsonl
for s in 500 1000 1023 1024 2000 3000 4000 8000 1000x4096x4096 4096x1000x4096 4096x4096x1000 777x1234x999 1x4096x4096 8x4096x4096 16x4096x4096 32x4096x4096 64x4096x4096 96x4096x4096 1x14336x4096 16x4096x14336 64x128256x4096; do
  for l in RC CC; do
    r=$(timeout 90 $B --no-store bench --shape $s --layout $l --reps 30 --json 2>>$OUT/err.txt)
    echo "{\"shape\":\"$s $l\",\"r\":$r}" >> $OUT/survey.jsonl
  done
done
python3 - $OUT/survey.jsonl <<'PY' | tee $OUT/summary.txt
import json, re, sys
txt = open(sys.argv[1]).read()
for rec in re.split(r'\n(?=\{"shape")', txt):
    try: d = json.loads(rec)
    except Exception: print("bad:", rec[:60].replace("\n", " ")); continue
    r = d["r"]; r = r[0] if isinstance(r, list) else r
    k, ratio = r["versions"][0]; c = r["vendor"]
    print(f"{d['shape']:20s} {k['version']:16s} kiln {k['median_ms']*1e3:9.2f} us  cublas {c['median_ms']*1e3:9.2f} us  ratio {ratio:.3f}  skipped {r.get('skipped')}")
PY
