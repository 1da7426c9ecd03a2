#!/usr/bin/env bash
# Session 11 run 8: the 64-row tiles' odd ring. Old binary (main, TINY64 11 stages) with odd
# rings forced (KILN_WGMMA_STAGES=3, 5) and its default, against the new one (even rings: 12 by
# default, 4 forced): repeated verifies at TINY64 shapes (each a fresh random problem, poisoned
# output), then the full suite with the new default, then old vs new timed in rotated rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
O=.carry/s11/kiln-base; N=.carry/s11/kiln-even; chmod +x $O $N
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "old: $(cat .carry/s11/commit)"; echo "new: $(cat .carry/s11/commit-even)"; } > $OUT/machine.txt
: > $OUT/stress.txt
stress() { # tag bin stages reps
  local tag=$1 bin=$2 st=$3 n=$4 fail=0 crash=0
  for i in $(seq $n); do
    for s in 128x4096x4096 512x512x512; do
      E=""; [ $st != d ] && E="KILN_WGMMA_STAGES=$st"
      env $E timeout 30 $bin --no-store verify --version wgmma_tma_ws --shape $s --layout RC > $OUT/v.txt 2>&1; rc=$?
      cat $OUT/v.txt >> $OUT/stress.txt
      if [ $rc -ne 0 ]; then fail=$((fail+1)); grep -q -i 'launch\|CUDA error\|timed out' $OUT/v.txt && crash=$((crash+1)); fi
      [ $rc -eq 124 ] && crash=$((crash+1))
    done
  done
  echo "$tag: $((2*n)) verifies, $fail failed ($crash with a CUDA error or timeout)" | tee -a $OUT/stress-summary.txt
}
stress "old stages 3 (odd) " $O 3 12
stress "old stages 5 (odd) " $O 5 12
stress "old default 11 (odd)" $O d 12
stress "new stages 4 (even)" $N 4 12
stress "new default 12     " $N d 12
timeout 300 $N --no-store verify --suite full > $OUT/verify-full.txt 2>&1; echo "new full suite rc $?"; tail -9 $OUT/verify-full.txt
: > $OUT/ab.jsonl
CASES="512x512x512:RC 128x4096x4096:RC 128x4096x4096:RR 128x4096x14336:RC 512x512x512:CC"
V="old new"
for round in 1 2 3 4; do
  for c in $CASES; do
    s=${c%:*}; l=${c#*:}
    for v in $V; do
      B=$O; [ $v = new ] && B=$N
      r=$(timeout 60 $B --no-store bench --shape $s --layout $l --reps 60 --json 2>>$OUT/err.txt)
      echo "{\"shape\":\"$s $l\",\"v\":\"$v\",\"round\":$round,\"r\":$r}" >> $OUT/ab.jsonl
    done
  done
  V="${V#* } ${V%% *}"
done
python3 .carry/s11/parse_ab.py $OUT/ab.jsonl | tee $OUT/summary.txt
cat $OUT/stress-summary.txt
rm -f $OUT/v.txt
