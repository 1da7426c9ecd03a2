#!/usr/bin/env bash
# Session 12 run 15: compute-sanitizer (memcheck, racecheck, synccheck, initcheck) over
# wgmma_tma_ws at kiln's small sanitize shapes with the 64x64 ping-pong tile forced, and with
# the default dispatch (main 6c6796b).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
N=.carry/s12/kiln-final2; chmod +x $N
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: $(cat .carry/s12/commit-final2)"; } > $OUT/machine.txt
: > $OUT/sanitize.txt
for cfg in pingpong-tiny default; do
  E=X=1; [ $cfg != default ] && E=KILN_WGMMA_CFG=$cfg
  echo "== $cfg" >> $OUT/sanitize.txt
  env $E timeout 280 $N --no-store sanitize --version wgmma_tma_ws --timeout 120 >> $OUT/sanitize.txt 2>&1
  echo "sanitize $cfg rc $?"
done
tail -40 $OUT/sanitize.txt
