#!/usr/bin/env bash
# Session 14 run 1: does the bench's memset flush (L2 left full of dirty lines) hide how slow
# kiln's decode kernels are? Every kernel one cuBLAS call launches (ncu, no -k filter, read
# flush so the flush kernel marks the boundaries), then kiln against cuBLAS with the memset and
# the read flush, alternating, at decode and target shapes (RC). Binary a (this session's first).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s14/kiln-a; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: a (HEAD 4ee228a + read flush)"; } > $OUT/machine.txt
NCU=$(command -v ncu)
: > $OUT/ncu.csv
for s in 128x4096x4096 8x4096x4096; do
  echo "== $s" >> $OUT/ncu.csv
  KILN_FLUSH=read timeout 150 $NCU --cache-control none --clock-control none --metrics gpu__time_duration.sum --launch-skip 20 -c 24 --csv --page raw $B --no-store bench --shape $s --reps 10 --warmup 1 >> $OUT/ncu.csv 2>> $OUT/ncu.err
done
python3 - $OUT/ncu.csv <<'PY' > $OUT/ncu-summary.txt
import csv, sys
tag = None; hdr = None
for line in open(sys.argv[1]):
    if line.startswith('== '): tag = line[3:].strip(); hdr = None; print(line.strip()); continue
    r = next(csv.reader([line]))
    if 'Kernel Name' in r: hdr = r; continue
    if hdr and len(r) == len(hdr) and r[0].strip().isdigit():
        d = dict(zip(hdr, r)); print(f"{float(d['gpu__time_duration.sum'].replace(',', ''))/1e3:8.2f} us  {d['Kernel Name'][:150]}")
PY
SH="8x4096x4096 128x4096x4096 128x14336x4096 128x4096x14336 512x4096x4096 512x512x512 1024x1024x1024 2048x2048x2048 4096x4096x4096"
: > $OUT/bench.jsonl
for rnd in 1 2; do
  for s in $SH; do
    if [ $rnd = 1 ]; then M="memset read"; else M="read memset"; fi
    for m in $M; do
      echo "{\"mode\":\"$m\",\"round\":$rnd,\"shape\":\"$s\"}" >> $OUT/bench.jsonl
      KILN_FLUSH=$m $B --no-store --json bench --shape $s --reps 40 >> $OUT/bench.jsonl 2>> $OUT/bench.err
    done
  done
done
python3 - $OUT/bench.jsonl <<'PY' | tee $OUT/summary.txt
import json, sys, collections, statistics as st
txt = open(sys.argv[1]).read(); dec = json.JSONDecoder(); i = 0; tag = None
res = collections.defaultdict(list)
def walk(o):
    if isinstance(o, dict):
        if 'version' in o and 'median_ms' in o: yield o
        for v in o.values(): yield from walk(v)
    elif isinstance(o, list):
        for v in o: yield from walk(v)
while i < len(txt):
    while i < len(txt) and txt[i].isspace(): i += 1
    if i >= len(txt): break
    o, i = dec.raw_decode(txt, i)
    if isinstance(o, dict) and 'mode' in o and 'round' in o: tag = (o['shape'], o['mode']); continue
    for t in walk(o): res[tag + (t['version'],)].append(t['median_ms'] * 1e3)
shapes = []
for k in res:
    if k[0] not in shapes: shapes.append(k[0])
print(f"{'shape':16s} {'mode':7s} {'kiln us':>9s} {'cuBLAS us':>9s} {'ratio':>6s}")
for s in shapes:
    for m in ('memset', 'read'):
        kl = [v for k, v in res.items() if k[0] == s and k[1] == m and k[2] != 'cublas']
        cb = res.get((s, m, 'cublas'), [])
        if not kl or not cb: continue
        a = st.median(kl[0]); b = st.median(cb)
        print(f"{s:16s} {m:7s} {a:9.2f} {b:9.2f} {b/a:6.3f}  rounds kiln {[round(x,1) for x in kl[0]]} cublas {[round(x,1) for x in cb]}")
PY
cat $OUT/ncu-summary.txt | head -80
