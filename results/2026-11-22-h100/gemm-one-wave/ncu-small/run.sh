#!/usr/bin/env bash
# Session 11 run 5: kernel-only durations (ncu, clocks not locked, caches flushed by ncu) of
# kiln's single-CTA and pair (SMALL_PAIR) kernels against cuBLAS's at the shapes where the
# event-timed ratio is under 0.95, with the tensor pipe, L2 and DRAM counters.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s11/kiln-sp; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; cat .carry/s11/commit-sp; } > $OUT/machine.txt
NCU=$(command -v ncu)
M=gpu__time_duration.sum,launch__grid_size,launch__cluster_dim_x,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__t_sectors.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__cycles_elapsed.avg.per_second,lts__t_sector_hit_rate.pct
run() { # tag shape layout env...
  local tag=$1 s=$2 l=$3; shift 3
  env "$@" timeout 100 $NCU --clock-control none --metrics $M -k regex:gemm_wgmma -c 4 --csv --page raw $B --no-store bench --shape $s --layout $l --reps 2 --warmup 1 > $OUT/ncu-$tag-$s-$l.csv 2> $OUT/ncu-$tag-$s-$l.err
  python3 - $OUT/ncu-$tag-$s-$l.csv $tag <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr = next((r for r in rows if 'Kernel Name' in r), None)
for r in (rows[rows.index(hdr) + 1:] if hdr else []):
    if len(r) != len(hdr) or not r[0].strip().isdigit(): continue
    d = dict(zip(hdr, r)); f = lambda k: float(d[k].replace(',', ''))
    print(f"{sys.argv[2]:4} {d['Kernel Name'][:44]:44} {f('gpu__time_duration.sum')/1e3:7.2f} us grid {d['launch__grid_size']:>4} cl {d['launch__cluster_dim_x']} {f('sm__cycles_elapsed.avg.per_second')/1e9:.2f} GHz tensor {d['sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed']:>6}% L2 {f('lts__t_sectors.sum')*32/1e6:7.1f} MB hit {d['lts__t_sector_hit_rate.pct']:>6}% dram r {f('dram__bytes_read.sum')/1e6:6.1f} w {f('dram__bytes_write.sum')/1e6:6.1f} MB")
PY
}
for c in 512x4096x4096:RC 512x4096x14336:CR 128x14336x4096:RR 2048x2048x2048:RC 512x512x512:RC 1024x1024x1024:RC; do
  s=${c%:*}; l=${c#*:}
  echo "== $s $l"
  run d $s $l
  case $s in 512x4096x4096|512x4096x14336) run sp $s $l KILN_WGMMA_CFG=small_pair;; esac
done 2>&1 | tee $OUT/summary.txt
