#!/usr/bin/env bash
# Session 12 run 7: ping-pong (forced) against the default at the target shapes still under 0.95x
# (one 128x128 tile per CTA at most of them: consumer 1 idle), two rotated rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s12/kiln-new; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: $(cat .carry/s12/commit-new)"; } > $OUT/machine.txt
: > $OUT/ab.jsonl
CASES="512x4096x4096:RC 512x4096x4096:CR 512x4096x4096:RR 512x4096x4096:CC 128x4096x4096:CR 128x14336x4096:CR 128x14336x4096:RR 512x4096x14336:CR 1024x1024x1024:RC"
V="coop pp"
for round in 1 2; do
  for c in $CASES; do
    s=${c%:*}; l=${c#*:}
    for v in $V; do
      E=X=1; [ $v = pp ] && E=KILN_WGMMA_CFG=pingpong
      r=$(env $E timeout 90 $B --no-store bench --shape $s --layout $l --reps 40 --json 2>>$OUT/err.txt)
      echo "{\"shape\":\"$s $l\",\"v\":\"$v\",\"round\":$round,\"r\":$r}" >> $OUT/ab.jsonl
    done
  done
  V="${V#* } ${V%% *}"
done
python3 .carry/s12/parse_ab.py $OUT/ab.jsonl | tee $OUT/summary.txt
