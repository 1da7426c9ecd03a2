#!/usr/bin/env bash
# Session 8 (n): is kiln's ~1 us at 512^3 host-side launch cost exposed by a short L2 flush?
# Experiment binary: KILN_FLUSH_REPEAT memsets before each timed launch; KILN_FLUSH_TIME prints
# one flush's GPU time. main's kernels.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-s8n; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "main b6b119e + flush experiment"; } > $OUT/machine.txt
KILN_FLUSH_TIME=1 $B --no-store bench --shape 512 --reps 5 --version wgmma_tma_ws 2>&1 | grep flush | head -20 > $OUT/flush-time.txt; cat $OUT/flush-time.txt | sort | head -3
: > /tmp/b.jsonl
for run in 1 2 3; do
  for rep in 1 4 16; do
    for s in 512 1024 128x4096x4096; do
      echo "{\"n\": $rep, \"r\": $(KILN_FLUSH_REPEAT=$rep $B --no-store --json bench --shape $s --reps 50 --version wgmma_tma_ws 2>>$OUT/err.txt | tr -d '\n')}" >> /tmp/b.jsonl
    done
  done
done
cp /tmp/b.jsonl $OUT/bench.jsonl
python3 - /tmp/b.jsonl <<'PY' | tee $OUT/summary.txt
import json, sys, collections, statistics as st
t = collections.defaultdict(lambda: collections.defaultdict(list)); order = []
for line in open(sys.argv[1]):
    o = json.loads(line)
    for r in o['r']:
        p = r['problem']; k = f"{p['m']}x{p['n']}x{p['k']}"
        if k not in order: order.append(k)
        t[k][o['n']].append((r['versions'][0][0]['median_ms']*1e3, r['vendor']['median_ms']*1e3, r['versions'][0][1]))
for k in order:
    for n, v in sorted(t[k].items()):
        print(f"{k:16s} flush x{n:2d}: kiln {st.median(x[0] for x in v):6.2f} us  cuBLAS {st.median(x[1] for x in v):6.2f} us  ratio {st.median(x[2] for x in v):.3f}")
PY
