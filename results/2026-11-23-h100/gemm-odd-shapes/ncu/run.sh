#!/usr/bin/env bash
# Session 13 run 2: ncu kernel durations of kiln's ws kernel (default, tiny64, pingpong-tiny)
# and cuBLAS's nvjet at 64^3, 256^3, 512^3 (run 1's event times: kiln +0.4, +1.0, +0.9 us).
# Caches flushed by ncu (default) and, second pass, left alone (the bench's memset flushes L2).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s13/kiln; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,driver_version --format=csv; date -u; echo "binary: $(cat .carry/s13/commit)"; } > $OUT/machine.txt
NCU=$(command -v ncu)
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,launch__grid_size,launch__cluster_dim_x,launch__cluster_dim_y,launch__block_size,launch__shared_mem_per_block_dynamic,launch__registers_per_thread
: > $OUT/ncu.csv
for cc in all none; do
for s in 64 256 512; do
  for cfg in default tiny64 pingpong-tiny; do
    echo "== $cc $s $cfg" >> $OUT/ncu.csv
    E=""; [ $cfg != default ] && E="KILN_WGMMA_CFG=$cfg"
    env $E timeout 120 $NCU --cache-control $cc --clock-control none --metrics $M -k regex:'gemm_wgmma' --launch-skip 5 -c 5 --csv --page raw $B --no-store bench --shape $s --version wgmma_tma_ws --reps 10 --warmup 1 >> $OUT/ncu.csv 2>> $OUT/ncu.err
  done
  echo "== $cc $s cublas" >> $OUT/ncu.csv
  timeout 120 $NCU --cache-control $cc --clock-control none --metrics $M -k regex:'nvjet' --launch-skip 5 -c 5 --csv --page raw $B --no-store bench --shape $s --version wgmma_tma_ws --reps 10 --warmup 1 >> $OUT/ncu.csv 2>> $OUT/ncu.err
done
done
python3 - $OUT/ncu.csv <<'PY' | tee $OUT/summary.txt
import csv, sys, statistics as st, collections
tag = None; hdr = None; t = collections.defaultdict(list); info = {}
for line in open(sys.argv[1]):
    if line.startswith('== '): tag = line[3:].strip(); hdr = None; continue
    r = next(csv.reader([line]))
    if 'Kernel Name' in r: hdr = r; continue
    if hdr and len(r) == len(hdr) and r[0].strip().isdigit():
        d = dict(zip(hdr, r)); f = lambda k: d.get(k, '?').replace(',', '')
        t[tag].append(float(f('gpu__time_duration.sum')) / 1e3)
        info[tag] = f"{d['Kernel Name'][:34]:34s} grid {f('launch__grid_size')} cl {f('launch__cluster_dim_x')}x{f('launch__cluster_dim_y')} blk {f('launch__block_size')} smem {f('launch__shared_mem_per_block_dynamic')} regs {f('launch__registers_per_thread')} {float(f('sm__cycles_elapsed.avg.per_second'))/1e9:.2f} GHz"
for k, v in t.items(): print(f"{k:26s} median {st.median(v):6.2f} us (n {len(v)}, min {min(v):.2f})  {info[k]}")
PY
