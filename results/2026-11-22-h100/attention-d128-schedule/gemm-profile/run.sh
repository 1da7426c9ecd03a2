#!/usr/bin/env bash
# ncu (clocks left alone) of wgmma_tma_ws and cuBLAS at 4096^3 and 8192^3 bf16 RC, one launch each.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=$OUT/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-final; chmod +x $B
NCU=$(command -v ncu)
SECS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section InstructionStats --section MemoryWorkloadAnalysis --section LaunchStats --section SourceCounters"
for n in 4096 8192; do
  $B --no-store bench --shape $n --version wgmma_tma_ws --reps 5 --warmup 2 > $OUT/plain-$n.txt 2>&1
  timeout 150 $NCU --clock-control none $SECS -k regex:gemm_wgmma_tma_ws -s 2 -c 1 -o $OUT/ours-$n $B --no-store bench --shape $n --version wgmma_tma_ws --reps 3 --warmup 2 > $OUT/ncu-ours-$n.log 2>&1; echo "ours $n rc $?"
  timeout 150 $NCU --clock-control none $SECS -k regex:nvjet -s 2 -c 1 -o $OUT/cublas-$n $B --no-store bench --shape $n --version wgmma_tma_ws --reps 3 --warmup 2 > $OUT/ncu-cublas-$n.log 2>&1; echo "cublas $n rc $?"
  for r in ours-$n cublas-$n; do
    [ -f $OUT/$r.ncu-rep ] || { tail -5 $OUT/ncu-$r.log; continue; }
    $NCU -i $OUT/$r.ncu-rep --page details --csv > $OUT/$r-details.csv 2>&1
    $NCU -i $OUT/$r.ncu-rep --page source --csv --print-source sass > $OUT/$r-source.csv 2>&1
    rm -f $OUT/$r.ncu-rep
    grep -E '"(Duration|SM Frequency|Elapsed Cycles|Compute \(SM\) Throughput|Issue Slots Busy|Registers Per Thread|Grid Size|L2 Hit Rate|DRAM Throughput)"' $OUT/$r-details.csv | awk -F'","' '{print "'$r'", $(NF-2), $(NF-1), $NF}'
  done
  tail -3 $OUT/plain-$n.txt
done
