#!/usr/bin/env bash
# Session 15 run 4: why the 2 x 2 clusters ran slower (binary c): ncu of kiln's kernel alone
# (grid, clusters, duration, tensor pipe, L2 requests and sectors) under pair, quad and
# medium-quad at 3000^3 and 4096^3, caches flushed by ncu.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
C=.carry/s15/kiln-c; chmod +x $C
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: c (2x2 clusters)"; } > $OUT/machine.txt
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
M=gpu__time_duration.sum,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__t_sectors.sum,lts__t_requests_srcunit_tex.sum,lts__t_sectors_srcunit_tex.sum,dram__bytes_read.sum,sm__cycles_elapsed.avg.per_second,launch__grid_size,launch__cluster_dim_x,launch__cluster_dim_y,launch__block_size
for sc in 3000:medium-pair 3000:medium-quad 3000:quad 4096:large 4096:pair 4096:quad; do
  s=${sc%:*}; c=${sc#*:}
  KILN_WGMMA_CFG=$c $C --no-store bench --shape $s --reps 2 > /dev/null 2>&1
  echo "== kiln-$s-$c" >> $OUT/ncu.csv
  timeout 200 env KILN_WGMMA_CFG=$c $NCU --clock-control none --metrics $M -k regex:gemm_wgmma -c 3 --csv --page raw $C --no-store bench --shape $s --reps 2 --warmup 1 >> $OUT/ncu.csv 2>> $OUT/ncu.err
done
python3 results/2026-11-23-h100/session15/ncu-3000/parse.py $OUT/ncu.csv | tee $OUT/summary.txt
