#!/usr/bin/env bash
# ncu of wgmma_tma_ws alone (the first run's files for it did not come back): 4096^3 and 8192^3.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-final; chmod +x $B
NCU=$(command -v ncu)
SECS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section InstructionStats --section MemoryWorkloadAnalysis --section LaunchStats --section SourceCounters"
for n in 4096 8192; do
  timeout 150 $NCU --clock-control none $SECS -k regex:gemm_wgmma_tma_ws -s 2 -c 1 -o /tmp/ours-$n $B --no-store bench --shape $n --version wgmma_tma_ws --reps 3 --warmup 2 > /tmp/ncu-ours-$n.log 2>&1; echo "ours $n rc $?"
  $NCU -i /tmp/ours-$n.ncu-rep --page details --csv > $OUT/ours-$n-details.csv 2>&1
  $NCU -i /tmp/ours-$n.ncu-rep --page source --csv --print-source sass > $OUT/ours-$n-source.csv 2>&1
done
ls -la $OUT
