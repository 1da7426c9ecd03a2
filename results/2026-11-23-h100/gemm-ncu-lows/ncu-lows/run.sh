#!/usr/bin/env bash
# Session 16 run 1: what cuBLAS runs (tile, cluster, grid) at the RC shapes still under ~0.96x
# in the survey and the target set, against kiln's default (binary a = main a4f248f).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
A=.carry/s16/kiln-a; chmod +x $A
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: a = a4f248f"; } > $OUT/machine.txt
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
M=gpu__time_duration.sum,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__t_sectors.sum,lts__t_requests_srcunit_tex.sum,lts__t_sectors_srcunit_tex.sum,dram__bytes_read.sum,sm__cycles_elapsed.avg.per_second,launch__grid_size,launch__cluster_dim_x,launch__cluster_dim_y,launch__block_size
SH="1024x11008x4096 1024x3584x18944 4096x3584x18944 2048x2048x2048 4000x4000x4000 128x4096x4096 512x4096x4096 16x11008x4096"
for s in $SH; do
  $A --no-store --json bench --shape $s --reps 20 >> $OUT/bench.jsonl 2>> $OUT/err.txt
  echo "== $s" >> $OUT/ncu.csv
  timeout 120 $NCU --clock-control none --metrics $M -c 30 --csv --page raw $A --no-store bench --shape $s --reps 2 --warmup 1 >> $OUT/ncu.csv 2>> $OUT/ncu.err
  echo "== kiln-$s" >> $OUT/ncu.csv
  timeout 120 $NCU --clock-control none --metrics $M -k regex:"gemm_|pack_rows|transpose_rows" -c 4 --csv --page raw $A --no-store bench --shape $s --reps 2 --warmup 1 >> $OUT/ncu.csv 2>> $OUT/ncu.err
done
python3 results/2026-11-23-h100/session15/ncu-3000/parse.py $OUT/ncu.csv > $OUT/summary.txt
python3 - $OUT/bench.jsonl $SH <<'PY' >> $OUT/summary.txt
import json, sys
txt = open(sys.argv[1]).read(); dec = json.JSONDecoder(); i = 0; n = 0
while i < len(txt):
    while i < len(txt) and txt[i].isspace(): i += 1
    if i >= len(txt): break
    o, i = dec.raw_decode(txt, i); r = o[0] if isinstance(o, list) else o
    k, v = r['versions'][0][0]['median_ms'] * 1e3, r['vendor']['median_ms'] * 1e3
    n += 1; print(f"{sys.argv[1 + n]:20s} kiln {k:8.2f} us cublas {v:8.2f} us ratio {v/k:.3f}")
PY
cat $OUT/summary.txt
