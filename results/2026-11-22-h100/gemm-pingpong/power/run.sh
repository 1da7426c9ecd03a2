#!/usr/bin/env bash
# Session 12 run 6: is cuBLAS more energy-efficient than kiln at 4096^3 and 8192^3? (a) ncu, one
# isolated launch each of kiln's cooperative kernel, its multicast pair and cuBLAS's kernel:
# time, clock, tensor pipe, L2 reads, DRAM reads; (b) sustained runs (--sequential, 8000 reps:
# the vendor's reps, then the version's) with the SM clock and board power sampled every 20 ms:
# kiln as the version, or cuBLAS as the version (both halves cuBLAS). The second half of the
# busy samples is the version's.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
N=.carry/s12/kiln-new; chmod +x $N
NCU=$(command -v ncu)
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: $(cat .carry/s12/commit-new)"; } > $OUT/machine.txt
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_op_read.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,smsp__inst_executed.sum
: > $OUT/ncu.csv
for s in 4096x4096x4096 8192x8192x8192; do
  for cfg in large pair; do
    echo "== $s kiln-$cfg" >> $OUT/ncu.csv
    KILN_WGMMA_CFG=$cfg $N --no-store bench --shape $s --reps 2 --warmup 1 > /dev/null 2>&1
    KILN_WGMMA_CFG=$cfg timeout 200 $NCU --clock-control none --metrics $M -k regex:'gemm_wgmma' --launch-skip 2 -c 1 --csv --page raw $N --no-store bench --shape $s --reps 3 --warmup 1 >> $OUT/ncu.csv 2>> $OUT/err.txt
  done
  echo "== $s cublas" >> $OUT/ncu.csv
  timeout 200 $NCU --clock-control none --metrics $M -k regex:'nvjet|sm90|cutlass' --launch-skip 2 -c 1 --csv --page raw $N --no-store bench --shape $s --reps 3 --warmup 1 >> $OUT/ncu.csv 2>> $OUT/err.txt
done
python3 - $OUT/ncu.csv <<'PY' | tee $OUT/ncu-summary.txt
import csv, sys
tag = None; hdr = None
for line in open(sys.argv[1]):
    if line.startswith('== '): tag = line[3:].strip(); hdr = None; continue
    r = next(csv.reader([line]))
    if 'Kernel Name' in r: hdr = r; continue
    if hdr and len(r) == len(hdr) and r[0].strip().isdigit():
        d = dict(zip(hdr, r)); f = lambda k: float(d[k].replace(',', ''))
        t = f('gpu__time_duration.sum')
        print(f"{tag:30s} {t/1e3:7.1f} us {f('sm__cycles_elapsed.avg.per_second')/1e9:.3f} GHz tensor {f('sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed'):5.1f}% L2 read {f('lts__t_sectors_op_read.sum')*32/1e9:5.2f} GB thr {f('lts__throughput.avg.pct_of_peak_sustained_elapsed'):5.1f}% dram {f('dram__bytes_read.sum')/1e9:5.3f} GB inst {f('smsp__inst_executed.sum')/1e6:6.1f} M  {d['Kernel Name'][:50]}")
PY
: > $OUT/power.txt
for s in 4096x4096x4096 8192x8192x8192; do
  R=8000; [ $s = 8192x8192x8192 ] && R=1200
  for v in kiln cublas kiln cublas; do
    VA=(); [ $v = cublas ] && VA=(--version cublas)
    sleep 15
    nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 20 > $OUT/smi.txt &
    SMI=$!
    r=$($N --no-store bench --shape $s --reps $R --sequential "${VA[@]}" --json 2>>$OUT/err.txt)
    kill $SMI; wait $SMI 2>/dev/null
    python3 - $s $v "$r" $OUT/smi.txt <<'PY' | tee -a $OUT/power.txt
import sys, json, statistics as st
s, v, r, f = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
r = r[0] if isinstance(r, list) else r
x = [tuple(map(float, l.split(','))) for l in open(f) if l.strip() and 'N/A' not in l]
busy = [y for y in x if y[1] > 300]; h = len(busy) // 2; a, b = busy[:h], busy[h:]
med = lambda z, i: st.median(y[i] for y in z) if z else float('nan')
print(f"{s} version={v:6s} vendor {r['vendor']['median_ms']*1e3:7.1f} us, version {r['versions'][0][0]['median_ms']*1e3:7.1f} us; busy samples {len(busy)}: vendor half {med(a,0):.0f} MHz {med(a,1):.0f} W, version half {med(b,0):.0f} MHz {med(b,1):.0f} W")
PY
  done
done
rm -f $OUT/smi.txt
