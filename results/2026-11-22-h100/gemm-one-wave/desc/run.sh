#!/usr/bin/env bash
# Session 11 run 11: wgmma descriptors built once per consumer and moved by one add per stage
# and k step (desc.diff) against main (78af8f3): full suite, then rotated rounds at one-wave and
# large shapes, cuBLAS in each process.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
O=.carry/s11/kiln-final; N=.carry/s11/kiln-desc; chmod +x $O $N
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "old: main $(cat .carry/s11/commit-final); new: + desc.diff"; } > $OUT/machine.txt
timeout 240 $N --no-store verify --version wgmma_tma_ws --suite full > $OUT/verify.txt 2>&1; echo "verify new full rc $? $(tail -1 $OUT/verify.txt)"
: > $OUT/ab.jsonl
CASES="512x4096x4096:RC 2048x2048x2048:RC 1024x1024x1024:RC 128x4096x4096:RC 4096x4096x4096:RC 8192x8192x8192:RC 512x4096x4096:CC"
V="old new"
for round in 1 2 3; do
  for c in $CASES; do
    s=${c%:*}; l=${c#*:}
    for v in $V; do
      B=$O; [ $v = new ] && B=$N
      r=$(timeout 90 $B --no-store bench --shape $s --layout $l --reps 40 --json 2>>$OUT/verify.txt)
      echo "{\"shape\":\"$s $l\",\"v\":\"$v\",\"round\":$round,\"r\":$r}" >> $OUT/ab.jsonl
    done
  done
  V="${V#* } ${V%% *}"
done
python3 .carry/s11/parse_ab.py $OUT/ab.jsonl | tee $OUT/summary.txt
