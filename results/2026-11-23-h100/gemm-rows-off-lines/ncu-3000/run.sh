#!/usr/bin/env bash
# Session 15 run 2: what cuBLAS runs at 3000^3 (rows off lines) against 3072^3, and how kiln's
# 128x192 pair (binary b) compares in L2 requests and sectors: ncu over every kernel one bench
# process launches (cuBLAS's selection candidates included), caches flushed by ncu.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s15/kiln-b; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: b = 5045141"; } > $OUT/machine.txt
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
M=gpu__time_duration.sum,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__t_sectors.sum,lts__t_requests_srcunit_tex.sum,lts__t_sectors_srcunit_tex.sum,dram__bytes_read.sum,sm__cycles_elapsed.avg.per_second,launch__grid_size,launch__cluster_dim_x,launch__cluster_dim_y,launch__block_size
$B --no-store bench --shape 8 --reps 2 > /dev/null 2>&1   # JIT warm
for s in 3000 3072 2992; do
  $B --no-store bench --shape $s --reps 2 > /dev/null 2>&1
  echo "== $s" >> $OUT/ncu.csv
  timeout 200 $NCU --clock-control none --metrics $M -c 40 --csv --page raw $B --no-store bench --shape $s --reps 2 --warmup 1 >> $OUT/ncu.csv 2>> $OUT/ncu.err
done
# kiln's kernel (after cuBLAS's 40 launches above): default (medium-pair at 3000^3), forced single
for sc in 3000:default 3000:medium 3072:default 2992:default 2992:medium; do
  s=${sc%:*}; c=${sc#*:}; [ $c = default ] && E="" || E="KILN_WGMMA_CFG=$c"
  echo "== kiln-$s-$c" >> $OUT/ncu.csv
  timeout 200 env $E $NCU --clock-control none --metrics $M -k regex:gemm_wgmma -c 3 --csv --page raw $B --no-store bench --shape $s --reps 2 --warmup 1 >> $OUT/ncu.csv 2>> $OUT/ncu.err
done
python3 results/2026-11-23-h100/session15/ncu-3000/parse.py $OUT/ncu.csv | tee $OUT/summary.txt
