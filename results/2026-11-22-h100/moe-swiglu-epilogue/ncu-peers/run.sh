#!/usr/bin/env bash
# Session 9 run d: what cuBLAS runs at the SwiGLU's dense analog (7872x6144x4096) and at
# 8192x4096x4096, against kiln's dense kernel and the fused SwiGLU (prefill, 8 x 1024 rows):
# ncu launch stats, speed of light and memory tables of every kernel, clocks not locked.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-s9c; chmod +x $B
NCU=$(command -v ncu)
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; cat .carry/lead/commit-s9c; } > $OUT/machine.txt
PREFILL=1512,1091,539,772,779,979,880,964
EVEN=1024,1024,1024,1024,1024,1024,1024,1024
S="--section LaunchStats --section SpeedOfLight --section MemoryWorkloadAnalysis"
run() { local tag=$1; shift; timeout 150 $NCU --clock-control none $S -k regex:'nvjet|sm90|gemm|moe_swiglu|cutlass' -c 6 -o $OUT/r-$tag "$@" > $OUT/ncu-$tag.log 2>&1; echo "ncu $tag rc $?"; $NCU -i $OUT/r-$tag.ncu-rep --page details --csv > $OUT/d-$tag.csv 2>&1; rm -f $OUT/r-$tag.ncu-rep; }
$B --no-store bench --shape 7872x6144x4096 --reps 2 --warmup 1 > /dev/null 2>&1
run dense7872 $B --no-store bench --shape 7872x6144x4096 --reps 2 --warmup 1
run dense8192 $B --no-store bench --shape 8192x4096x4096 --reps 2 --warmup 1
run swiglu $B --no-store moe bench --counts $PREFILL --n 3072 --k 4096 --swiglu --reps 2 --warmup 1
run even $B --no-store moe bench --counts $EVEN --n 3072 --k 4096 --swiglu --reps 2 --warmup 1
python3 - $OUT <<'PY' | tee $OUT/ncu.txt
import csv, sys, glob, collections
want = ['Duration', 'Grid Size', 'Block Size', 'Cluster Size', 'Registers Per Thread', 'Dynamic Shared Memory Per Block',
        'SM Frequency', 'Compute (SM) Throughput', 'Memory Throughput', 'L2 Cache Throughput', 'DRAM Throughput',
        'L1/TEX Hit Rate', 'L2 Hit Rate', 'Mem Busy', 'Max Bandwidth', 'L2 Compression Success Rate']
for f in sorted(glob.glob(sys.argv[1] + '/d-*.csv')):
    rows = list(csv.reader(open(f)))
    if not rows or 'Kernel Name' not in rows[0]: print(f, 'no data'); continue
    h = rows[0]; ki = h.index('Kernel Name'); mi = h.index('Metric Name'); vi = h.index('Metric Value'); ii = h.index('ID')
    k = collections.OrderedDict()
    for r in rows[1:]:
        k.setdefault((r[ii], r[ki]), {})[r[mi]] = r[vi]
    print('==', f.split('/')[-1])
    for (i, name), m in k.items():
        print(f"  [{i}] {name[:90]}")
        print("      " + "; ".join(f"{w}={m[w]}" for w in want if w in m))
PY
