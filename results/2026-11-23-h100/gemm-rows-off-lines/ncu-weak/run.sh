#!/usr/bin/env bash
# Session 15 run 18: what cuBLAS runs at the shapes still weakest after this session (binary j):
# ncu over every kernel one bench process launches (cuBLAS's selection included), then kiln's.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
J=.carry/s15/kiln-j; chmod +x $J
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: j = b7162f7"; } > $OUT/machine.txt
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
M=gpu__time_duration.sum,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__t_sectors.sum,lts__t_requests_srcunit_tex.sum,lts__t_sectors_srcunit_tex.sum,dram__bytes_read.sum,sm__cycles_elapsed.avg.per_second,launch__grid_size,launch__cluster_dim_x,launch__cluster_dim_y,launch__block_size
for sl in 1024x5120x5120:RC 1000x1000x4000:RC 1000x1000x4000:CR 16x5120x5120:CR; do
  s=${sl%:*}; l=${sl#*:}
  $J --no-store bench --shape $s --layout $l --reps 2 > /dev/null 2>&1
  echo "== $s-$l" >> $OUT/ncu.csv
  timeout 150 $NCU --clock-control none --metrics $M -c 40 --csv --page raw $J --no-store bench --shape $s --layout $l --reps 2 --warmup 1 >> $OUT/ncu.csv 2>> $OUT/ncu.err
  echo "== kiln-$s-$l" >> $OUT/ncu.csv
  timeout 150 $NCU --clock-control none --metrics $M -k regex:"gemm_|pack_rows|transpose_rows" -c 6 --csv --page raw $J --no-store bench --shape $s --layout $l --reps 2 --warmup 1 >> $OUT/ncu.csv 2>> $OUT/ncu.err
done
python3 results/2026-11-23-h100/session15/ncu-3000/parse.py $OUT/ncu.csv | tee $OUT/summary.txt
