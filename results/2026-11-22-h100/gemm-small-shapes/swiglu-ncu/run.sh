#!/usr/bin/env bash
# Session 7: why the fused SwiGLU (648 effective TFLOPS) trails the plain grouped GEMM (679) with
# the same 128x256 mainloop: ncu of both at prefill (speed of light, warp states, per-SASS stall
# sampling), one launch each.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-s7i; chmod +x $B
NCU=$(command -v ncu)
PREFILL=1512,1091,539,772,779,979,880,964
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: c08644d"; } > $OUT/machine.txt
$B --no-store moe bench --counts $PREFILL --n 3072 --k 4096 --swiglu --reps 3 --warmup 2 > /dev/null 2>&1
timeout 200 $NCU --clock-control none --section SpeedOfLight --section WarpStateStats --section SourceCounters -k regex:'moe_swiglu_dual|moe_grouped_gemm' -c 2 -o $OUT/r $B --no-store moe bench --counts $PREFILL --n 3072 --k 4096 --swiglu --reps 1 --warmup 0 > $OUT/ncu.log 2>&1; echo "ncu rc $?"
$NCU -i $OUT/r.ncu-rep --page details --csv > $OUT/details.csv 2>&1
$NCU -i $OUT/r.ncu-rep --page source --csv --print-source sass > $OUT/source.csv 2>&1
rm -f $OUT/r.ncu-rep
python3 - $OUT <<'PY' | tee $OUT/summary.txt
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1] + '/details.csv')))
h = rows[0]; ki = h.index('Kernel Name'); mi = h.index('Metric Name'); vi = h.index('Metric Value'); ii = h.index('ID')
for r in rows[1:]:
    if any(w in r[mi] for w in ('Duration', 'Throughput', 'Warp Cycles Per Issued', 'SM Frequency', 'Executed Ipc')):
        print(f"  {r[ii]} {r[ki][:24]:24s} {r[mi][:45]:45s} {r[vi]}")
# source page: one block per kernel, each starting with a "Kernel Name" line
txt = open(sys.argv[1] + '/source.csv').read().split('"Kernel Name",')
for block in txt[1:]:
    lines = list(csv.reader(block.splitlines()))
    name = lines[0][0]; hdr = lines[1]
    ai = hdr.index('Address'); si = hdr.index('Source'); ni = hdr.index('Warp Stall Sampling (All Samples)')
    ins = [(int(float(r[ni] or 0)), r[ai], r[si]) for r in lines[2:] if len(r) > ni]
    tot = sum(x[0] for x in ins)
    print(f"== {name}: samples {tot}; top 22")
    for n, a, s in sorted(ins, reverse=True)[:22]:
        print(f"    {n:7d} {100*n/tot:5.1f}% {a[-5:]} {s[:80]}")
PY
