#!/usr/bin/env bash
# Session 11 run 4: 128x128 tiles in CTA pairs multicasting B (SMALL_PAIR, forced with
# KILN_WGMMA_CFG=small_pair) against the default at the suite's one-wave long-K shapes; cuBLAS's
# kernel names and durations there (ncu, clocks not locked).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s11/kiln-sp; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; cat .carry/s11/commit-sp; } > $OUT/machine.txt
KILN_WGMMA_CFG=small_pair timeout 240 $B --no-store verify --version wgmma_tma_ws --suite full > $OUT/verify-sp.txt 2>&1; echo "verify small_pair full rc $? $(tail -1 $OUT/verify-sp.txt)"
for l in CR RR CC; do KILN_WGMMA_CFG=small_pair timeout 60 $B --no-store verify --version wgmma_tma_ws --shape 512x4096x4096 --layout $l >> $OUT/verify-sp.txt 2>&1; echo "verify sp 512x4096x4096 $l rc $?"; done
KILN_WGMMA_CFG=small_pair KILN_WGMMA_SPLITS=2 timeout 60 $B --no-store verify --version wgmma_tma_ws --shape 1000x3000x704 >> $OUT/verify-sp.txt 2>&1; echo "verify sp split2 1000x3000x704 rc $?"
KILN_WGMMA_CFG=small_pair timeout 60 $B --no-store verify --version wgmma_tma_ws --shape 4096 --out f32 --beta 0.5 >> $OUT/verify-sp.txt 2>&1; echo "verify sp f32 beta rc $?"
CASES="512x4096x4096:RC 512x4096x4096:CC 512x4096x14336:CR 128x14336x4096:RR 512x14336x4096:RC 2048x2048x2048:RC"
: > $OUT/ab.jsonl
V="d sp"
for round in 1 2 3; do
  for c in $CASES; do
    s=${c%:*}; l=${c#*:}
    for v in $V; do
      E=""; [ $v = sp ] && E="KILN_WGMMA_CFG=small_pair"
      r=$(env $E timeout 60 $B --no-store bench --shape $s --layout $l --reps 60 --json 2>>$OUT/err.txt)
      echo "{\"shape\":\"$s $l\",\"v\":\"$v\",\"round\":$round,\"r\":$r}" >> $OUT/ab.jsonl
    done
  done
  V="${V#* } ${V%% *}"
done
python3 .carry/s11/parse_ab.py $OUT/ab.jsonl | tee $OUT/summary.txt
NCU=$(command -v ncu)
M=gpu__time_duration.sum,launch__grid_size,launch__cluster_dim_x,launch__cluster_dim_y,launch__shared_mem_per_block_dynamic
for c in 512x4096x4096:RC 512x4096x14336:CR 128x14336x4096:RR 512x512x512:RC; do
  s=${c%:*}; l=${c#*:}
  timeout 100 $NCU --clock-control none --metrics $M -k regex:'nvjet|gemm_|sm90|cutlass' -c 4 --csv --page raw $B --no-store bench --shape $s --layout $l --reps 1 --warmup 1 > $OUT/ncu-$s-$l.csv 2> $OUT/ncu-$s-$l.err
  echo "ncu $s $l rc $?"
  python3 - $OUT/ncu-$s-$l.csv <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr = next((r for r in rows if 'Kernel Name' in r), None)
for r in (rows[rows.index(hdr) + 1:] if hdr else []):
    if len(r) != len(hdr) or not r[0].strip().isdigit(): continue
    d = dict(zip(hdr, r))
    print(f"  {d['Kernel Name'][:70]:70} {d['gpu__time_duration.sum']:>8} ns grid {d['launch__grid_size']} cluster {d['launch__cluster_dim_x']}x{d['launch__cluster_dim_y']} smem {d['launch__shared_mem_per_block_dynamic']}")
PY
done
