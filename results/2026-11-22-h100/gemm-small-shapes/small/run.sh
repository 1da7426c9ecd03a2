#!/usr/bin/env bash
# Session 7 diagnostic for issue 3's small shapes: (1) kiln vs cuBLAS at 512^3, 1024^3,
# 128x4096x4096, 128x4096x14336 with and without L2 flush (host-bound launches would make kiln's
# no-flush time grow); (2) ncu launch stats + speed of light of every kernel either side runs.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-s7a; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; cat .carry/lead/commit-s7a; nproc; lscpu | grep -i 'model name'; } > $OUT/machine.txt
SHAPES="512x512x512 1024x1024x1024 128x4096x4096 128x4096x14336"
: > $OUT/bench.jsonl
for round in 1 2; do for s in $SHAPES; do for fl in "" "--no-flush"; do
  echo "{\"flush\": \"$fl\", \"r\": " >> $OUT/bench.jsonl
  $B --no-store --json bench --shape $s --reps 50 --warmup-ms 200 $fl 2>>$OUT/err.txt | tr -d '\n' >> $OUT/bench.jsonl; echo "}" >> $OUT/bench.jsonl
done; done; done
python3 - $OUT/bench.jsonl <<'PY' | tee $OUT/bench.txt
import json, sys, collections, statistics as st
txt = open(sys.argv[1]).read().replace('\n', '')
dec = json.JSONDecoder(); i = 0; t = collections.defaultdict(list)
while i < len(txt):
    o, j = dec.raw_decode(txt, i); i = j
    for r in o['r']:
        p = r['problem']; key = f"{p['m']}x{p['n']}x{p['k']}"
        t[(key, o['flush'] or 'flush', 'cublas')].append(r['vendor']['median_ms'] * 1000)
        t[(key, o['flush'] or 'flush', 'kiln')].append(r['versions'][0][0]['median_ms'] * 1000)
for key in sorted({k[0] for k in t}):
    for fl in ('flush', '--no-flush'):
        c = st.median(t[(key, fl, 'cublas')]); k = st.median(t[(key, fl, 'kiln')])
        print(f"{key:16s} {fl:10s} kiln {k:7.2f} us  cuBLAS {c:7.2f} us  ratio {c/k:.3f}  rounds kiln {t[(key,fl,'kiln')]} cublas {t[(key,fl,'cublas')]}")
PY
NCU=$(command -v ncu)
for s in $SHAPES 4096x4096x4088; do
  timeout 150 $NCU --clock-control none --section LaunchStats --section SpeedOfLight --section Occupancy -c 8 -o $OUT/r$s $B --no-store bench --shape $s --reps 2 --warmup 1 > $OUT/ncu-$s.log 2>&1; echo "ncu $s rc $?"
  $NCU -i $OUT/r$s.ncu-rep --page details --csv > $OUT/d-$s.csv 2>&1; rm -f $OUT/r$s.ncu-rep
done
python3 - $OUT <<'PY' | tee $OUT/ncu.txt
import csv, sys, glob, collections
for f in sorted(glob.glob(sys.argv[1] + '/d-*.csv')):
    rows = list(csv.reader(open(f)))
    if len(rows) < 2: print(f, 'empty'); continue
    h = rows[0]; ii = h.index('ID'); ki = h.index('Kernel Name'); mi = h.index('Metric Name'); vi = h.index('Metric Value')
    per = collections.OrderedDict()
    for r in rows[1:]:
        per.setdefault((r[ii], r[ki]), {})[r[mi]] = r[vi]
    seen = set()
    print('==', f.split('/')[-1])
    for (i, k), m in per.items():
        name = k[:90]
        if name in seen: continue
        seen.add(name)
        print(f"  {name}\n     dur {m.get('Duration')} grid {m.get('Grid Size')} block {m.get('Block Size')} regs {m.get('Registers Per Thread')} smem {m.get('Dynamic Shared Memory Per Block')} cluster {m.get('Cluster Size')} SMfreq {m.get('SM Frequency')} SM% {m.get('Compute (SM) Throughput')} mem% {m.get('Memory Throughput')}")
PY
