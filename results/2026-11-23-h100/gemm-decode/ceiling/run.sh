#!/usr/bin/env bash
# Session 14 run 4: the read ceiling for decode GEMMs. `kiln peak` (now also a 1 GiB read and a
# 32 MiB read from a flushed L2, the l2_read_flush kernel), twice; then every kernel of a bench
# under ncu (duration only, no ncu flush; the bench's read flush runs between timed launches),
# the last 10 of each name being the timed ones, at 128x4096x4096 and 8x4096x4096. Binary c.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s14/kiln-c; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: c"; } > $OUT/machine.txt
for i in 1 2; do $B --no-store peak >> $OUT/peak.txt 2>&1; done
NCU=$(command -v ncu)
: > $OUT/ncu.csv
for s in 128x4096x4096 8x4096x4096; do
  echo "== $s" >> $OUT/ncu.csv
  timeout 200 $NCU --cache-control none --clock-control none --metrics gpu__time_duration.sum -c 600 --csv --page raw $B --no-store bench --shape $s --reps 10 --warmup 2 >> $OUT/ncu.csv 2>> $OUT/ncu.err
  $B --no-store bench --shape $s --reps 30 2>&1 | tail -3 >> $OUT/bench.txt
done
python3 - $OUT/ncu.csv <<'PY' | tee $OUT/summary.txt
import csv, sys, collections, statistics as st
tag = None; hdr = None; seq = collections.defaultdict(list)
for line in open(sys.argv[1]):
    if line.startswith('== '): tag = line[3:].strip(); hdr = None; continue
    r = next(csv.reader([line]))
    if 'Kernel Name' in r: hdr = r; continue
    if hdr and len(r) == len(hdr) and r[0].strip().isdigit():
        d = dict(zip(hdr, r)); seq[tag].append((d['Kernel Name'][:90], float(d['gpu__time_duration.sum'].replace(',', '')) / 1e3))
for tag, ks in seq.items():
    print(f"== {tag}: {len(ks)} kernels; the last 10 of each name")
    names = list(dict.fromkeys(n for n, _ in ks))
    for n in names:
        v = [t for m, t in ks if m == n][-10:]
        print(f"  {st.median(v):8.2f} us median of {len(v):2d}  {n}")
PY
cat $OUT/peak.txt $OUT/bench.txt
