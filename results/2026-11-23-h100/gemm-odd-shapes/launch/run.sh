#!/usr/bin/env bash
# Session 13 run 1: where does 512^3's extra microsecond between events come from (ledger #26)?
# Event time of nearly empty problems (64^3 .. 512^3) for kernels with different launch
# footprints (simt_naive: no smem, small params; mma_sync: dynamic smem; wgmma_tma: tensor
# maps; wgmma_tma_ws: tensor maps, 384 threads, ~200 KB smem) against cuBLAS in the same
# process; then ncu kernel durations at 64^3 and 512^3 for the ws kernel and cuBLAS.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s13/kiln; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,driver_version --format=csv; date -u; echo "binary: $(cat .carry/s13/commit)"; command -v nsys ncu; } > $OUT/machine.txt
: > $OUT/bench.jsonl
for s in 64 128 256 512; do
  for v in simt_naive mma_sync wgmma_tma wgmma_tma_ws; do
    $B --no-store --json bench --shape $s --version $v --reps 60 >> $OUT/bench.jsonl 2>>$OUT/err.txt
  done
  for cfg in pingpong-tiny tiny64; do
    KILN_WGMMA_CFG=$cfg $B --no-store --json bench --shape $s --version wgmma_tma_ws --reps 60 | sed "s/\"wgmma_tma_ws\"/\"ws-$cfg\"/g" >> $OUT/bench.jsonl 2>>$OUT/err.txt
  done
done
NCU=$(command -v ncu)
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second
: > $OUT/ncu.csv
for s in 64 512; do
  for v in wgmma_tma_ws simt_naive; do
    echo "== $s $v" >> $OUT/ncu.csv
    timeout 120 $NCU --clock-control none --metrics $M --launch-skip 6 -c 4 --csv --page raw $B --no-store bench --shape $s --version $v --reps 3 --warmup 1 >> $OUT/ncu.csv 2>> $OUT/ncu.err
  done
done
python3 - $OUT/bench.jsonl $OUT/ncu.csv <<'PY' | tee $OUT/summary.txt
import json, sys, csv
print("event medians (us): version shape kiln vendor diff")
text = open(sys.argv[1]).read(); dec = json.JSONDecoder(); i = 0; docs = []
while True:
    while i < len(text) and text[i].isspace(): i += 1
    if i >= len(text): break
    d, i = dec.raw_decode(text, i); docs.extend(d if isinstance(d, list) else [d])
if True:
    for r in docs:
        p = r['problem']; v = r['vendor']['median_ms'] * 1e3
        for k, ratio in r['versions']:
            t = k['median_ms'] * 1e3
            print(f"  {k['version']:18s} {p['m']:4d}  kiln {t:6.2f} (min {k['min_ms']*1e3:5.2f})  cublas {v:6.2f} (min {r['vendor']['min_ms']*1e3:5.2f})  +{t - v:5.2f}")
tag = None; hdr = None
for line in open(sys.argv[2]):
    if line.startswith('== '): tag = line[3:].strip(); hdr = None; continue
    r = next(csv.reader([line]))
    if 'Kernel Name' in r: hdr = r; continue
    if hdr and len(r) == len(hdr) and r[0].strip().isdigit():
        d = dict(zip(hdr, r))
        print(f"ncu {tag:20s} {d['Kernel Name'][:40]:40s} {float(d['gpu__time_duration.sum'].replace(',', ''))/1e3:7.2f} us")
PY
