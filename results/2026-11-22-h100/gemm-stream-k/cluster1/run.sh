#!/usr/bin/env bash
# Session 8 (p): is kiln's ~1 us before its kernel at 512^3 the non-cluster launch path? The same
# kernels launched as clusters of one (KILN_CLUSTER1=1, experiment binary) against plain launches,
# five alternating rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-s8p; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "main 9212f69 + KILN_CLUSTER1 experiment"; } > $OUT/machine.txt
timeout 100 env KILN_CLUSTER1=1 $B --no-store verify --suite quick --version wgmma_tma_ws > $OUT/verify.txt 2>&1; echo "verify rc $?: $(tail -1 $OUT/verify.txt)"
: > /tmp/b.jsonl
for run in 1 2 3 4 5; do
  for b in $([ $((run % 2)) = 0 ] && echo "c1 plain" || echo "plain c1"); do
    E=; [ $b = c1 ] && E=KILN_CLUSTER1=1
    for s in 512 1024 128x4096x4096 2048; do
      echo "{\"b\": \"$b\", \"r\": $(env $E $B --no-store --json bench --shape $s --reps 50 --version wgmma_tma_ws 2>>$OUT/err.txt | tr -d '\n')}" >> /tmp/b.jsonl
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
        t[k][o['b']].append((r['versions'][0][0]['median_ms']*1e3, r['vendor']['median_ms']*1e3, r['versions'][0][1]))
for k in order:
    for b, v in t[k].items():
        print(f"{k:16s} {b:6s} kiln {st.median(x[0] for x in v):7.2f} us  cuBLAS {st.median(x[1] for x in v):7.2f} us  ratio {st.median(x[2] for x in v):.3f}  {[round(x[2],3) for x in v]}")
PY
