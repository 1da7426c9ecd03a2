#!/usr/bin/env bash
# Session 8 (d): (1) ncu of kiln and cuBLAS at 512^3 and 1024^3 (duration, speed of light, memory
# workload, warp states); (2) 4096x4096x4088 (the one default pairs shape) with pairs deferring
# one chunk (HEAD 710f58b) against all four, three alternating rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
HEAD=.carry/lead/kiln-s8c-head; NEW=.carry/lead/kiln-s8c-pairdefer; chmod +x $HEAD $NEW
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "head 710f58b; pairdefer = head + DCH 4 for pairs"; } > $OUT/machine.txt
: > /tmp/b.jsonl
for run in 1 2 3; do
  for b in $([ $run = 2 ] && echo "pair4 pair1" || echo "pair1 pair4"); do
    BIN=$HEAD; [ $b = pair4 ] && BIN=$NEW
    echo "{\"b\": \"$b\", \"r\": $($BIN --no-store --json bench --shape 4096x4096x4088 --reps 30 2>>$OUT/err.txt | tr -d '\n')}" >> /tmp/b.jsonl
  done
done
python3 - /tmp/b.jsonl <<'PY' | tee $OUT/pairs4088.txt
import json, sys, collections, statistics as st
t = collections.defaultdict(list)
for line in open(sys.argv[1]):
    o = json.loads(line)
    for r in o['r']: t[o['b']].append((round(r['versions'][0][1], 4), round(r['versions'][0][0]['median_ms']*1e3, 1), round(r['vendor']['median_ms']*1e3, 1)))
for b, v in t.items(): print(b, 'median ratio', st.median(x[0] for x in v), v)
PY
NCU=$(command -v ncu)
for s in 512 1024; do
  timeout 150 $NCU --clock-control none --section LaunchStats --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats -k regex:'gemm_wgmma|nvjet' -c 6 -o /tmp/r$s $NEW --no-store bench --shape $s --reps 3 --warmup 1 > $OUT/ncu-$s.log 2>&1; echo "ncu $s rc $?"
  $NCU -i /tmp/r$s.ncu-rep --page details --csv > /tmp/d-$s.csv 2>&1
done
python3 - <<'PY' | tee $OUT/ncu.txt
import csv, collections
for s in ('512', '1024'):
    rows = list(csv.reader(open(f'/tmp/d-{s}.csv')))
    h = rows[0]; ii = h.index('ID'); ki = h.index('Kernel Name'); mi = h.index('Metric Name'); vi = h.index('Metric Value'); ui = h.index('Metric Unit')
    per = collections.OrderedDict()
    for r in rows[1:]:
        if len(r) == len(h): per.setdefault((r[ii], r[ki]), {})[r[mi]] = (r[vi], r[ui])
    print('==', s)
    for (i, k), m in per.items():
        print(f"  [{i}] {k[:60]}")
        print("     " + "; ".join(f"{n} {v[0]} {v[1]}" for n, v in m.items()))
PY
