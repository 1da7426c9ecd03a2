#!/usr/bin/env bash
# Session 7, issue 3's 4096x4096x4088 (0.84x): ncu of kiln's kernel at K 4096 and 4088 (same
# config: 128x256 CTA pairs): speed of light, memory tables, warp states, and per-SASS stall
# sampling, to see whether consumers wait on `full` (loads late) or the producer on `empty`.
# Then grouped-order widths 4 / 16 at 4088 (KILN_WGMMA_GROUP_M), two rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-s7c; chmod +x $B
NCU=$(command -v ncu)
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: 0cb6bda"; } > $OUT/machine.txt
for k in 4096 4088; do
  A="--no-store bench --shape 4096x4096x$k --version wgmma_tma_ws --reps 3 --warmup 2"
  $B $A > /dev/null 2>&1
  timeout 200 $NCU --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SourceCounters -k regex:gemm_wgmma_tma_ws -s 2 -c 1 -o $OUT/r$k $B $A > $OUT/ncu-$k.log 2>&1; echo "ncu $k rc $?"
  $NCU -i $OUT/r$k.ncu-rep --page source --csv --print-source sass > $OUT/source-$k.csv 2>&1
  $NCU -i $OUT/r$k.ncu-rep --page details --csv > $OUT/details-$k.csv 2>&1
  rm -f $OUT/r$k.ncu-rep
done
python3 - $OUT <<'PY' | tee $OUT/summary.txt
import csv, sys, collections
for k in (4096, 4088):
    rows = list(csv.reader(open(f"{sys.argv[1]}/details-{k}.csv")))
    h = rows[0]; mi = h.index('Metric Name'); vi = h.index('Metric Value'); si = h.index('Section Name')
    print(f"== K {k}")
    for r in rows[1:]:
        if any(w in r[mi] for w in ('Duration', 'Throughput', 'Hit Rate', 'Busy', 'Bandwidth', 'Stall', 'Warp Cycles Per')):
            print(f"  {r[si][:28]:28s} {r[mi][:50]:50s} {r[vi]}")
    rows = list(csv.reader(open(f"{sys.argv[1]}/source-{k}.csv")))
    h = rows[1]; ai = h.index('Address'); si2 = h.index('Source'); ni = h.index('Warp Stall Sampling (All Samples)')
    ins = [(int(float(r[ni] or 0)), r[ai], r[si2]) for r in rows[2:] if len(r) > ni]
    tot = sum(x[0] for x in ins)
    print(f"  samples {tot}; top 25:")
    for n, a, s in sorted(ins, reverse=True)[:25]:
        print(f"    {n:7d} {100*n/tot:5.1f}% {a} {s[:90]}")
PY
: > $OUT/group.jsonl
for round in 1 2; do for g in 8 4 16; do
  echo -n "{\"g\": $g, \"r\": " >> $OUT/group.jsonl
  KILN_WGMMA_GROUP_M=$g $B --no-store --json bench --shape 4096x4096x4088 --version wgmma_tma_ws --reps 30 --warmup-ms 200 2>>$OUT/err.txt | tr -d '\n' >> $OUT/group.jsonl; echo "}" >> $OUT/group.jsonl
done; done
python3 -c "
import json
for l in open('$OUT/group.jsonl'):
    o = json.loads(l); r = o['r'][0]
    print('group', o['g'], 'kiln %.1f us' % (r['versions'][0][0]['median_ms']*1000), 'cuBLAS %.1f us' % (r['vendor']['median_ms']*1000), 'ratio %.3f' % r['versions'][0][1])
" | tee $OUT/group.txt
