#!/usr/bin/env bash
# Issue 3's 4096x4096x4088 (0.84x): is it the row alignment of A and B (K 4088: 8176-byte rows,
# 16-byte aligned, so a 128-byte TMA box row spans 5 sectors) pushing an L2-bound kernel over?
# (1) kiln and cuBLAS at M = N = 4096 and K = 4096 (128-byte rows), 4080 (32-byte), 4088 and
# 4072 (16-byte), two rounds. (2) ncu memory throughput (L2, DRAM, SM) of kiln and cuBLAS at
# K 4096 and 4088, one launch each, clocks left alone.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-idle; chmod +x $B
NCU=$(command -v ncu)
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; cat .carry/lead/commit-idle; } > $OUT/machine.txt
: > $OUT/bench.jsonl
for round in 1 2; do for k in 4096 4080 4088 4072; do
  $B --no-store --json bench --shape 4096x4096x$k --reps 30 2>>$OUT/err.txt | tr -d '\n' >> $OUT/bench.jsonl; echo >> $OUT/bench.jsonl
done; done
python3 - $OUT/bench.jsonl <<'PY' | tee $OUT/bench.txt
import json, sys, collections, statistics as st
t = collections.defaultdict(list)
for l in open(sys.argv[1]):
    l = l.strip()
    if not l: continue
    for r in json.loads(l):
        k = r['problem']['k']; v = r['vendor']; ours = [x for vs in r['versions'] for x in (vs if isinstance(vs, list) else [vs]) if isinstance(x, dict) and 'median_ms' in x]
        t[(k, 'cublas')].append(v['median_ms'])
        for x in ours: t[(k, x['version'])].append(x['median_ms'])
for k in (4096, 4080, 4088, 4072):
    c = st.median(t[(k, 'cublas')])
    for name in sorted(n for kk, n in t if kk == k and n != 'cublas'):
        m = st.median(t[(k, name)])
        print(f"K {k} ({(k * 2) % 128 or 128}-byte row offset class): {name} {m * 1000:.1f} us, cuBLAS {c * 1000:.1f} us, ratio {c / m:.3f}")
PY
for k in 4096 4088; do
  A="--no-store bench --shape 4096x4096x$k --reps 3 --warmup 2"
  timeout 200 $NCU --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis -k regex:'gemm_wgmma|nvjet|sm90' -c 2 -o $OUT/r$k $B $A > $OUT/ncu-$k.log 2>&1; echo "ncu $k rc $?"
  $NCU -i $OUT/r$k.ncu-rep --page details --csv > $OUT/details-$k.csv 2>&1
  rm -f $OUT/r$k.ncu-rep
done
python3 - $OUT <<'PY'
import csv, sys, glob
for f in sorted(glob.glob(sys.argv[1] + '/details-*.csv')):
    rows = list(csv.reader(open(f)))
    if len(rows) < 2: print(f, 'empty'); continue
    h = rows[0]
    ki = h.index('Kernel Name'); mi = h.index('Metric Name'); vi = h.index('Metric Value'); ui = h.index('Metric Unit')
    want = ('Duration', 'SM Frequency', 'Memory Throughput', 'L2 Cache Throughput', 'DRAM Throughput', 'Compute (SM) Throughput', 'L1/TEX Hit Rate', 'L2 Hit Rate')
    for r in rows[1:]:
        if r[mi] in want: print(f.split('/')[-1], r[ki][:40], r[mi], r[vi], r[ui])
PY
