#!/usr/bin/env bash
# Session 13 run 17: decode-ncu/ collected many metrics (several replay passes; with no cache
# flush, passes after the first find A and B in L2), so its durations may be warm. Here the
# duration alone (one pass), no ncu flush (the bench's memset flushes L2), kiln and cuBLAS at
# 128x4096x4096 and 8x4096x4096, beside the bench's event times. Binary e22ed66.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s13/kiln-e22ed66; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: e22ed66"; } > $OUT/machine.txt
NCU=$(command -v ncu)
: > $OUT/ncu.csv
for s in 128x4096x4096 8x4096x4096; do
  for k in gemm_wgmma nvjet; do
    echo "== $s $k" >> $OUT/ncu.csv
    timeout 120 $NCU --cache-control none --clock-control none --metrics gpu__time_duration.sum -k regex:$k --launch-skip 5 -c 5 --csv --page raw $B --no-store bench --shape $s --reps 10 --warmup 1 >> $OUT/ncu.csv 2>> $OUT/ncu.err
  done
  $B --no-store bench --shape $s --reps 30 2>&1 | tail -3 >> $OUT/bench.txt
done
python3 - $OUT/ncu.csv <<'PY' | tee $OUT/summary.txt
import csv, sys, statistics as st, collections
tag = None; hdr = None; t = collections.defaultdict(list)
for line in open(sys.argv[1]):
    if line.startswith('== '): tag = line[3:].strip(); hdr = None; continue
    r = next(csv.reader([line]))
    if 'Kernel Name' in r: hdr = r; continue
    if hdr and len(r) == len(hdr) and r[0].strip().isdigit():
        d = dict(zip(hdr, r)); t[tag].append(float(d['gpu__time_duration.sum'].replace(',', '')) / 1e3)
for k, v in t.items(): print(f"{k:28s} median {st.median(v):6.2f} us {sorted(round(x, 2) for x in v)}")
PY
cat $OUT/bench.txt
