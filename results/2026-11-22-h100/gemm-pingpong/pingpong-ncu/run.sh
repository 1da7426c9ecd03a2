#!/usr/bin/env bash
# Session 12 run 2: why the ping-pong kernel (128x128 tiles) is 14 % slower than the cooperative
# 128x256 at 4096^3: ncu, clocks not locked, one launch each of cooperative single, cooperative
# multicast pair and ping-pong (4096^3 RC, and 4096x4096x1024 where ping-pong won): tensor pipe,
# L2 read sectors and L2 throughput.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s12/kiln; chmod +x $B
NCU=$(command -v ncu)
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: $(cat .carry/s12/commit) + working tree (ping-pong)"; } > $OUT/machine.txt
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_op_read.sum,lts__t_sectors.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_ltcfabric.sum,dram__bytes_read.sum
: > $OUT/ncu.csv
for s in 4096x4096x4096 4096x4096x1024; do
  for cfg in large pair pingpong; do
    echo "== $s $cfg" >> $OUT/ncu.csv
    KILN_WGMMA_CFG=$cfg $B --no-store bench --shape $s --reps 2 --warmup 1 > /dev/null 2>&1
    KILN_WGMMA_CFG=$cfg timeout 200 $NCU --clock-control none --metrics $M -k regex:'gemm_wgmma' --launch-skip 2 -c 1 --csv --page raw $B --no-store bench --shape $s --reps 3 --warmup 1 >> $OUT/ncu.csv 2>> $OUT/ncu.err
    echo "ncu $s $cfg rc $?"
  done
done
python3 - $OUT/ncu.csv <<'PY' | tee $OUT/summary.txt
import csv, sys
tag = None; hdr = None
for line in open(sys.argv[1]):
    if line.startswith('== '): tag = line[3:].strip(); hdr = None; continue
    r = next(csv.reader([line]))
    if 'Kernel Name' in r: hdr = r; continue
    if hdr and len(r) == len(hdr) and r[0].strip().isdigit():
        d = dict(zip(hdr, r)); f = lambda k: float(d[k].replace(',', ''))
        t = f('gpu__time_duration.sum')
        print(f"{tag:28s} {t/1e3:8.1f} us {f('sm__cycles_elapsed.avg.per_second'):.3f} GHz tensor {f('sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed'):5.1f}%  L2 read {f('lts__t_sectors_op_read.sum')*32/1e9:6.2f} GB ({f('lts__t_sectors_op_read.sum')*32/t:6.2f} TB/s)  L2 sectors {f('lts__t_sectors.avg.pct_of_peak_sustained_elapsed'):5.1f}% thr {f('lts__throughput.avg.pct_of_peak_sustained_elapsed'):5.1f}%  fabric {f('lts__t_sectors_srcunit_ltcfabric.sum')*32/1e9:5.2f} GB dram {f('dram__bytes_read.sum')/1e9:5.2f} GB")
PY
