#!/usr/bin/env bash
# Session 10 run: how busy cuBLAS keeps the tensor pipe at the issue-3 shapes (4096^3, 8192^3
# bf16), against kiln's kernel: ncu raw counters (tensor pipe % of elapsed and of active cycles,
# SM active, clock), clocks not locked; plus the plain bench (no ncu) for the ratio.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s10/kiln-final; chmod +x $B
NCU=$(command -v ncu)
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; cat .carry/s10/commit-final; } > $OUT/machine.txt
M=sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,sm__cycles_active.avg,sm__cycles_elapsed.avg,sm__cycles_elapsed.avg.per_second,gpu__time_duration.sum
for s in 4096x4096x4096 8192x8192x8192; do
  $B --no-store bench --shape $s --reps 2 --warmup 1 > /dev/null 2>&1
  timeout 200 $NCU --clock-control none --metrics $M -k regex:'nvjet|gemm_|sm90|cutlass' -c 4 --csv --page raw $B --no-store bench --shape $s --reps 1 --warmup 1 > $OUT/ncu-$s.csv 2> $OUT/ncu-$s.err
  echo "ncu $s rc $?"
  timeout 120 $B --no-store bench --shape $s > $OUT/bench-$s.txt 2>&1
done
python3 - $OUT <<'PY' | tee $OUT/summary.txt
import csv, glob, sys
for f in sorted(glob.glob(sys.argv[1] + '/ncu-*.csv')):
    rows = list(csv.reader(open(f)))
    hdr = next((r for r in rows if 'Kernel Name' in r), None)
    if not hdr: print(f, 'no data'); continue
    print('==', f.split('ncu-')[1])
    for r in rows[rows.index(hdr) + 1:]:
        if len(r) != len(hdr) or not r[0].strip().isdigit(): continue
        d = dict(zip(hdr, r))
        act = float(d['sm__cycles_active.avg'].replace(',', '')) / float(d['sm__cycles_elapsed.avg'].replace(',', ''))
        print(f"  {d['Kernel Name'][:60]:60} {d['gpu__time_duration.sum']:>10} ns  {float(d['sm__cycles_elapsed.avg.per_second']):.3f} GHz  tensor {d['sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed']}% of elapsed, {d['sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active']}% of active; SMs active {100*act:.1f}%")
PY
grep -h -E 'TFLOPS|cublas|wgmma|ratio|x cuBLAS|\|' $OUT/bench-*.txt | head -20
