#!/usr/bin/env bash
# Session 22 run 1 (probe, main's binary 9c9648d): (a) why 512^3 CR runs 1.1 us slower than the
# other layouts (7.6 against 6.5 us, every final run since session 14): the layouts rotated, the
# one-wave configs forced in CR and RC, and one stamped launch of each layout; (b) whether a
# 16-row grouped order moves less DRAM and runs faster than 8 at 8192^3 on this power-capped
# board: ncu DRAM/L2 bytes for kiln G8, G16 and cuBLAS, then G8 against G16 rotated.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/probe; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
K=.carry/probe/kiln; chmod +x $K
save() { tar czf $FINAL/probe.tgz -C /tmp probe; }
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; nproc; date -u; echo "binary: $(cat .carry/probe/COMMIT)"; } > $OUT/machine.txt
b() { timeout 40 $K --no-store --json bench "$@" 2>> $OUT/err.txt; }
: > $OUT/layouts.jsonl
for r in 1 2; do for l in RC CR RR CC CC RR CR RC; do
  echo "{\"cfg\":\"$l\",\"shape\":\"512^3\"}" >> $OUT/layouts.jsonl; b --shape 512 --layout $l --reps 30 >> $OUT/layouts.jsonl
done; done
for l in RC CR; do echo "{\"cfg\":\"$l\",\"shape\":\"1024^3\"}" >> $OUT/layouts.jsonl; b --shape 1024 --layout $l --reps 30 >> $OUT/layouts.jsonl; done
for l in CR RC RC CR; do echo "{\"cfg\":\"$l\",\"shape\":\"1024^3\"}" >> $OUT/layouts.jsonl; b --shape 1024 --layout $l --reps 30 >> $OUT/layouts.jsonl; done
save
: > $OUT/cfgs.jsonl
for l in CR RC; do for r in 1 2; do for c in pingpong-tiny tiny64 pingpong64 tiny small; do
  echo "{\"cfg\":\"$c\",\"shape\":\"512^3 $l\"}" >> $OUT/cfgs.jsonl
  KILN_WGMMA_CFG=$c b --shape 512 --layout $l --reps 30 >> $OUT/cfgs.jsonl
done; done; done
save
for l in RC CR; do timeout 60 $K --no-store profile gemm wgmma_tma_ws --shape 512 --layout $l --timeline --reps 20 > $OUT/timeline-$l.txt 2>&1; done
save
NCU=$(command -v ncu)
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_op_read.sum,lts__t_sectors_srcunit_ltcfabric.sum,dram__bytes_read.sum,dram__bytes_write.sum
: > $OUT/ncu.csv
for g in 8 16; do
  echo "== 8192^3 G$g" >> $OUT/ncu.csv
  KILN_WGMMA_GROUP_M=$g timeout 150 $NCU --clock-control none --metrics $M -k regex:'gemm_wgmma|nvjet' --launch-skip 2 -c 2 --csv --page raw $K --no-store bench --shape 8192 --reps 2 --warmup 1 >> $OUT/ncu.csv 2>> $OUT/ncu.err
  echo "ncu G$g rc $?"
done
save
: > $OUT/group.jsonl
for s in 8192x8192x8192 8192x14336x4096 4096x4096x4096; do
  rounds="8 16 16 8"; [ $s = 8192x8192x8192 ] && rounds="8 16 16 8 8 16 16 8"
  for g in $rounds; do
    echo "{\"cfg\":\"G$g\",\"shape\":\"$s RC\"}" >> $OUT/group.jsonl
    KILN_WGMMA_GROUP_M=$g b --shape $s --reps 20 >> $OUT/group.jsonl
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
        t = f('gpu__time_duration.sum'); name = d['Kernel Name'][:28]
        print(f"{tag:12s} {name:28s} {t/1e3:8.1f} us {f('sm__cycles_elapsed.avg.per_second'):.3f} GHz tensor {f('sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed'):5.1f}%  L2 read {f('lts__t_sectors_op_read.sum')*32/1e9:6.2f} GB fabric {f('lts__t_sectors_srcunit_ltcfabric.sum')*32/1e9:5.2f} GB dram rd {f('dram__bytes_read.sum')/1e9:5.2f} wr {f('dram__bytes_write.sum')/1e9:5.2f} GB")
PY
for f in layouts cfgs group; do echo "== $f"; python3 scripts/ab-table.py $OUT/$f.jsonl | tee $OUT/$f.txt; done
for l in RC CR; do echo "== timeline $l"; tail -25 $OUT/timeline-$l.txt; done
save
