#!/usr/bin/env bash
# Session 10 run 4: what bounds the SwiGLU: ncu --set full (raw metrics) of the SwiGLU at prefill
# (single CTAs, and CTA pairs), kiln's dense kernel and cuBLAS at 8192x4096x4096; clocks not locked.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s10/kiln-c; chmod +x $B
NCU=$(command -v ncu)
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; cat .carry/s10/commit-c; $NCU --version | tail -1; } > $OUT/machine.txt
PREFILL=1512,1091,539,772,779,979,880,964
run() { local tag=$1 kre=$2; shift 2; timeout 200 $NCU --clock-control none --set full -k regex:"$kre" -c 1 -o /tmp/r-$tag "$@" > $OUT/ncu-$tag.log 2>&1; echo "ncu $tag rc $?"; $NCU -i /tmp/r-$tag.ncu-rep --page raw --csv > /tmp/raw-$tag.csv 2>&1; }
$B --no-store moe bench --counts $PREFILL --n 3072 --k 4096 --swiglu --reps 2 --warmup 1 > /dev/null 2>&1
KILN_SWIGLU_PAIR=1 $B --no-store moe bench --counts $PREFILL --n 3072 --k 4096 --swiglu --reps 2 --warmup 1 > /dev/null 2>&1
$B --no-store bench --shape 8192x4096x4096 --reps 2 --warmup 1 > /dev/null 2>&1
run swiglu moe_swiglu $B --no-store moe bench --counts $PREFILL --n 3072 --k 4096 --swiglu --reps 1 --warmup 1
KILN_SWIGLU_PAIR=1 run pair moe_swiglu $B --no-store moe bench --counts $PREFILL --n 3072 --k 4096 --swiglu --reps 1 --warmup 1
run kiln8192 'wgmma|gemm_' $B --no-store bench --shape 8192x4096x4096 --reps 1 --warmup 1
run cublas8192 'nvjet|sm90_xmma|cutlass' $B --no-store bench --shape 8192x4096x4096 --reps 1 --warmup 1
python3 - <<'PY' | tee $OUT/ncu.txt
import csv, glob
keys = ['gpu__time_duration.sum', 'sm__cycles_elapsed.avg.per_second', 'sm__throughput.avg.pct_of_peak_sustained_elapsed',
        'sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active', 'sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed',
        'sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active',
        'l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed',
        'l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed', 'l1tex__data_bank_writes.avg.pct_of_peak_sustained_elapsed',
        'l1tex__throughput.avg.pct_of_peak_sustained_active', 'lts__throughput.avg.pct_of_peak_sustained_elapsed',
        'lts__t_sectors.avg.pct_of_peak_sustained_elapsed', 'dram__throughput.avg.pct_of_peak_sustained_elapsed',
        'smsp__issue_active.avg.pct_of_peak_sustained_active', 'sm__cycles_active.avg']
for f in sorted(glob.glob('/tmp/raw-*.csv')):
    rows = [r for r in csv.reader(open(f))]
    hdr = next((r for r in rows if 'Kernel Name' in r), None)
    if hdr is None: print(f, 'no data'); continue
    data = [r for r in rows[rows.index(hdr) + 1:] if len(r) == len(hdr) and r[0].strip().isdigit()]
    print('==', f.split('raw-')[1], len(hdr), 'metrics')
    for r in data:
        d = dict(zip(hdr, r)); print('  kernel', d['Kernel Name'][:80])
        for k in keys:
            if k in d: print(f'    {k} = {d[k]}')
        for k in sorted(d):
            if ('shared' in k or 'tensor' in k or 'gmma' in k) and 'pct' in k and k not in keys: print(f'    {k} = {d[k]}')
PY
gzip -c /tmp/raw-swiglu.csv > $OUT/raw-swiglu.csv.gz; gzip -c /tmp/raw-cublas8192.csv > $OUT/raw-cublas8192.csv.gz
