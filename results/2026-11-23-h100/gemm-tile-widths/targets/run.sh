#!/usr/bin/env bash
# Session 17 run 5: the final rule (binary c: 128x224 where N is a multiple of 224, two
# tile-rows, rows on lines and a K-major B). Issue 3's target set in four layouts, then 8192^3
# RC three times more (0.941 in run 4, 1.004 in the other layouts).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
K=.carry/s17/kiln-c; chmod +x $K
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: c (final 224 rule)"; } > $OUT/machine.txt
timeout 330 $K --no-store --json bench --set targets --layouts RC,CR,RR,CC --reps 30 > $OUT/targets.json 2>>$OUT/err.txt
echo "targets rc $?"
sed -n '/^python3 - \$OUT\/targets.json/,/^PY$/p' results/2026-11-23-h100/session15/final/run.sh > /tmp/targets.sh
OUT=$OUT bash /tmp/targets.sh
for i in 1 2 3; do
  timeout 60 $K --no-store --json bench --shape 8192 --layout RC --reps 30 > $OUT/8192-$i.json 2>>$OUT/err.txt
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); r=r[0] if isinstance(r,list) else r; print('8192^3 RC', r['versions'][0][0]['median_ms'], r['vendor']['median_ms'], r['versions'][0][1])" $OUT/8192-$i.json
done
