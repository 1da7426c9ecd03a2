#!/usr/bin/env bash
# Session 12 run 4: ping-pong against the cooperative default where 128x256 tiles make at most
# one wave and 128x128 tiles more than one (the rule run 3 suggests: 2048^3 +2-6 % in every
# layout), over K and neighbouring shapes, three rotated rounds, cuBLAS in the same process.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s12/kiln; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: $(cat .carry/s12/commit) + working tree (ping-pong)"; } > $OUT/machine.txt
: > $OUT/ab.jsonl
CASES="2048x2048x2048:RC 2048x2048x1024:RC 2048x2048x4096:RC 2048x2048x8192:RC 1024x4096x4096:RC 1024x4096x1024:RC 1024x4096x14336:CR 1536x2560x4096:RC 2048x1536x2048:RR"
V="coop pp"
for round in 1 2 3; do
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
