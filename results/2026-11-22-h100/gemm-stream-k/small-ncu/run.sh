#!/usr/bin/env bash
# Session 8 (e): ncu of kiln's and cuBLAS's kernels at 512^3 and 1024^3: launch stats, speed of
# light, memory workload, warp states (kiln and cuBLAS captured separately, 3 launches each).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-s8c-head; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "head 710f58b"; } > $OUT/machine.txt
NCU=$(command -v ncu)
for s in 512 1024; do
  for k in gemm_wgmma nvjet; do
    timeout 150 $NCU --clock-control none --section LaunchStats --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats -k regex:$k -c 3 -o /tmp/r$s$k $B --no-store bench --shape $s --reps 3 --warmup 1 > /tmp/ncu-$s-$k.log 2>&1; echo "ncu $s $k rc $?"
    $NCU -i /tmp/r$s$k.ncu-rep --page details --csv > /tmp/d-$s-$k.csv 2>&1
  done
done
cd /tmp && tar czf $OUT/ncu-csv.tgz d-*.csv ncu-*.log
