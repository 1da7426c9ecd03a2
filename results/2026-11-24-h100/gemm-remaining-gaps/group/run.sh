#!/usr/bin/env bash
# Session 22 run 2 (main's binary 9c9648d, KILN_WGMMA_GROUP_M through the env): run 1 had the
# 16-row grouped order at 1.000x cuBLAS against 0.978 for 8 at 8192^3 (paired, 4 processes each).
# (a) ncu: DRAM and L2 bytes of kiln's kernel at G8 / G16 / G32 (8192^3, 8192x128256x4096) and
# of cuBLAS's; (b) G8 against G16 rotated 8 ways over the target set's multi-wave shapes, G32 at
# two of them.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/group; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
K=.carry/probe/kiln; chmod +x $K
save() { tar czf $FINAL/group.tgz -C /tmp group; }
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; nproc; date -u; echo "binary: $(cat .carry/probe/COMMIT)"; } > $OUT/machine.txt
b() { timeout 60 $K --no-store --json bench "$@" 2>> $OUT/err.txt; }
NCU=$(command -v ncu)
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_op_read.sum,lts__t_sectors_srcunit_ltcfabric.sum,dram__bytes_read.sum,dram__bytes_write.sum
: > $OUT/ncu.csv
for s in 8192x8192x8192 8192x128256x4096; do
  for g in 8 16 32 cublas; do
    echo "== $s G$g" >> $OUT/ncu.csv
    if [ $g = cublas ]; then rx=nvjet; e=8; else rx=gemm_wgmma; e=$g; fi
    KILN_WGMMA_GROUP_M=$e timeout 120 $NCU --clock-control none --metrics $M -k regex:$rx --launch-skip 1 -c 1 --csv --page raw $K --no-store bench --shape $s --reps 2 --warmup 1 >> $OUT/ncu.csv 2>> $OUT/ncu.err
    echo "ncu $s G$g rc $?"
  done
  save
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
        t = f('gpu__time_duration.sum'); name = d['Kernel Name'][:24]
        print(f"{tag:26s} {name:24s} {t/1e3:8.1f} us {f('sm__cycles_elapsed.avg.per_second')/1e9:.3f} GHz tensor {f('sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed'):5.1f}%  L2 read {f('lts__t_sectors_op_read.sum')*32/1e9:6.2f} GB fabric {f('lts__t_sectors_srcunit_ltcfabric.sum')*32/1e9:5.2f} GB dram rd {f('dram__bytes_read.sum')/1e9:5.2f} wr {f('dram__bytes_write.sum')/1e9:5.2f} GB")
PY
save
: > $OUT/group.jsonl
for s in 8192x8192x8192 16384x16384x16384 8192x14336x4096 8192x4096x14336 8192x128256x4096 2048x128256x4096 8192x4096x4096 2048x14336x4096 4096x4096x4096 4000x4000x4000; do
  for g in 8 16 16 8 8 16 16 8; do
    echo "{\"cfg\":\"G$g\",\"shape\":\"$s RC\"}" >> $OUT/group.jsonl
    KILN_WGMMA_GROUP_M=$g b --shape $s --reps 20 >> $OUT/group.jsonl
  done
  save
done
for s in 8192x8192x8192 8192x128256x4096; do
  for g in 32 12 12 32; do
    echo "{\"cfg\":\"G$g\",\"shape\":\"$s RC\"}" >> $OUT/group.jsonl
    KILN_WGMMA_GROUP_M=$g b --shape $s --reps 20 >> $OUT/group.jsonl
  done
done
python3 scripts/ab-table.py $OUT/group.jsonl | tee $OUT/group.txt
save
