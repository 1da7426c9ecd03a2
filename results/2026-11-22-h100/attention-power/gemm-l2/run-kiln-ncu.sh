#!/usr/bin/env bash
# Second half of gemm-l2/: the first ncu run caught only cuBLAS's kernels (its filter took the
# first two matching launches). kiln's wgmma_tma_ws alone at K 4096 and 4088 (M = N = 4096),
# one launch each, clocks left alone: speed of light and memory workload.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-idle; chmod +x $B
NCU=$(command -v ncu)
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; cat .carry/lead/commit-idle; } > $OUT/machine.txt
for k in 4096 4088; do
  A="--no-store bench --shape 4096x4096x$k --version wgmma_tma_ws --reps 3 --warmup 2"
  $B $A > $OUT/bench-$k.txt 2>&1
  timeout 200 $NCU --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis -k regex:gemm_wgmma_tma_ws -s 2 -c 1 -o $OUT/r$k $B $A > $OUT/ncu-$k.log 2>&1; echo "ncu $k rc $?"
  $NCU -i $OUT/r$k.ncu-rep --page details --csv > $OUT/details-kiln-$k.csv 2>&1
  rm -f $OUT/r$k.ncu-rep
done
python3 - $OUT <<'PY'
import csv, sys, glob
for f in sorted(glob.glob(sys.argv[1] + '/details-kiln-*.csv')):
    rows = list(csv.reader(open(f)))
    if len(rows) < 2: print(f, 'empty'); continue
    h = rows[0]
    ki = h.index('Kernel Name'); mi = h.index('Metric Name'); vi = h.index('Metric Value'); ui = h.index('Metric Unit')
    want = ('Duration', 'SM Frequency', 'Memory Throughput', 'L2 Cache Throughput', 'DRAM Throughput', 'Compute (SM) Throughput', 'L2 Hit Rate')
    for r in rows[1:]:
        if r[mi] in want: print(f.split('/')[-1], r[ki][:30], r[mi], r[vi], r[ui])
PY
