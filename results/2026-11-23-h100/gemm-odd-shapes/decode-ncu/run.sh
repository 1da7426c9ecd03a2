#!/usr/bin/env bash
# Session 13 run 9: what bounds the weight-streaming shapes? 128x4096x4096 runs 22 us in kiln
# and cuBLAS alike, 33 MB from DRAM (L2 flushed) = 1.5 TB/s, half of HBM3's 3.35. ncu (no
# cache flush: the bench's memset flushes L2) of kiln's default, 128x256 split 8, and cuBLAS at
# 128x4096x4096 and 8x4096x4096: DRAM and L2 throughput, bytes, duration. Main b5dec26.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s13/kiln-b5dec26; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: b5dec26"; } > $OUT/machine.txt
NCU=$(command -v ncu)
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,lts__t_sectors_op_read.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__m_xbar2l1tex_read_bytes.sum,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed,launch__grid_size,sm__cycles_elapsed.avg.per_second
: > $OUT/ncu.csv
for s in 128x4096x4096 8x4096x4096 128x14336x4096; do
  for cfg in default large-split8 small-split4; do
    echo "== $s $cfg" >> $OUT/ncu.csv
    E=X=1; [ $cfg = large-split8 ] && E="KILN_WGMMA_CFG=large KILN_WGMMA_SPLITS=8"; [ $cfg = small-split4 ] && E="KILN_WGMMA_CFG=small KILN_WGMMA_SPLITS=4"
    env $E timeout 120 $NCU --cache-control none --clock-control none --metrics $M -k regex:'gemm_wgmma' --launch-skip 3 -c 3 --csv --page raw $B --no-store bench --shape $s --reps 8 --warmup 1 >> $OUT/ncu.csv 2>> $OUT/ncu.err
  done
  echo "== $s cublas" >> $OUT/ncu.csv
  timeout 120 $NCU --cache-control none --clock-control none --metrics $M -k regex:'nvjet|gemv|gemm' --launch-skip 3 -c 3 --csv --page raw $B --no-store bench --shape $s --version cublas --reps 8 --warmup 1 >> $OUT/ncu.csv 2>> $OUT/ncu.err
done
python3 - $OUT/ncu.csv <<'PY' | tee $OUT/summary.txt
import csv, sys, statistics as st, collections
tag = None; hdr = None; rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    if line.startswith('== '): tag = line[3:].strip(); hdr = None; continue
    r = next(csv.reader([line]))
    if 'Kernel Name' in r: hdr = r; continue
    if hdr and len(r) == len(hdr) and r[0].strip().isdigit(): rows[tag].append(dict(zip(hdr, r)))
for tag, ds in rows.items():
    d = ds[len(ds) // 2]; f = lambda k: float(d[k].replace(',', ''))
    t = f('gpu__time_duration.sum')
    print(f"{tag:30s} {d['Kernel Name'][:36]:36s} grid {d['launch__grid_size']:>4s} {t/1e3:7.2f} us {f('sm__cycles_elapsed.avg.per_second')/1e9:.2f} GHz dram {f('dram__throughput.avg.pct_of_peak_sustained_elapsed'):5.1f}% {f('dram__bytes_read.sum')/1e6:6.1f} MB  L2 read {f('lts__t_sectors_op_read.sum')*32/1e6:6.1f} MB L2 thr {f('lts__throughput.avg.pct_of_peak_sustained_elapsed'):5.1f}%  xbar->L1 {f('l1tex__m_xbar2l1tex_read_bytes.sum')/1e6:6.1f} MB tensor {f('sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed'):5.1f}%")
PY
