#!/usr/bin/env bash
# Session 8 (l): 512x128256x4096 (the last wave split in 5) read 5 % slower with
# common/split_k.cuh in three rounds whose old runs spread 698-738 us: six more alternating rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
OLD=.carry/lead/kiln-s8c-head; NEW=.carry/lead/kiln-s8k; chmod +x $OLD $NEW
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "old 710f58b; new = common/split_k.cuh"; } > $OUT/machine.txt
: > /tmp/b.jsonl
for run in 1 2 3 4 5 6; do
  for b in $([ $((run % 2)) = 0 ] && echo "new old" || echo "old new"); do
    BIN=$OLD; [ $b = new ] && BIN=$NEW
    echo "{\"b\": \"$b\", \"r\": $($BIN --no-store --json bench --shape 512x128256x4096 --reps 30 --version wgmma_tma_ws 2>>$OUT/err.txt | tr -d '\n')}" >> /tmp/b.jsonl
  done
done
cp /tmp/b.jsonl $OUT/gemm.jsonl
python3 - /tmp/b.jsonl <<'PY' | tee $OUT/summary.txt
import json, sys, collections, statistics as st
t = collections.defaultdict(list)
for line in open(sys.argv[1]):
    o = json.loads(line)
    for r in o['r']: t[o['b']].append((round(r['versions'][0][0]['median_ms']*1e3, 1), round(r['vendor']['median_ms']*1e3, 1), round(r['versions'][0][1], 3)))
for b, v in t.items(): print(b, 'kiln median', st.median(x[0] for x in v), 'ratio median', st.median(x[2] for x in v), v)
PY
