#!/usr/bin/env bash
# Session 12 run 17 (review mend): both warp-specialised kernels' register epilogue replaced by
# common/wgmma_epilogue.cuh's wgmma_store_m64 (the single-warpgroup kernels' copy of the same
# code; the register-epilogue SASS changed): full suite, then f32 C against main 5faf4cd, two
# rotated rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
O=.carry/s12/kiln-final2; N=.carry/s12/kiln-epi; chmod +x $O $N
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "old: 5faf4cd (code of 6c6796b); new: + shared register epilogue"; } > $OUT/machine.txt
timeout 300 $N --no-store verify --suite full --version wgmma_tma_ws > $OUT/verify.txt 2>&1; rc=$?; echo "verify exit $rc: $(tail -1 $OUT/verify.txt)"; [ $rc -ne 0 ] && exit 1
: > $OUT/ab.jsonl
CASES="2048x2048x2048:RC:f32 512x4096x4096:RC:f32 1024x1024x1024:RC:f32 4096x4096x4096:RC:f32 128x4096x4096:CR:f32"
V="old new"
for round in 1 2; do
  for c in $CASES; do
    IFS=: read s l o <<< "$c"
    for v in $V; do
      B=$O; [ $v = new ] && B=$N
      r=$(timeout 90 $B --no-store bench --shape $s --layout $l --out $o --reps 40 --json 2>>$OUT/err.txt)
      echo "{\"shape\":\"$s $l $o\",\"v\":\"$v\",\"round\":$round,\"r\":$r}" >> $OUT/ab.jsonl
    done
  done
  V="${V#* } ${V%% *}"
done
python3 .carry/s12/parse_ab.py $OUT/ab.jsonl | tee $OUT/summary.txt
