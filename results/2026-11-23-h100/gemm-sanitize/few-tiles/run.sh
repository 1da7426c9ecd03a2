#!/usr/bin/env bash
# Session 18 run 8 (binary o, the final code): #76's two forced wins (pairs split 4 at
# 1000x1000x4000 CR, 128x256 split 4 at 1000x1000x8000 RC) over more shapes with few tiles, long
# K and rows at an odd multiple of 16 bytes: data for a rule, no code change. Rotated a b b a.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
K=.carry/s18/kiln-o; chmod +x $K
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: o (session 18 final kernels)"; } > $OUT/machine.txt
: > $OUT/sweep.jsonl
for sl in 1000x1000x4000:CR 1000x1000x4000:CC 1000x1000x8000:CR 1000x2000x4000:CR 1000x1000x4008:RC 600x1000x8008:RC 520x1000x4000:CR; do
  s=${sl%:*}; l=${sl#*:}
  cfgs="default pair:s2 pair:s4 large:s4 medium-pair:s2"
  for cfg in $cfgs $(printf '%s\n' $cfgs | tac); do
    c=${cfg%%:*}; x=${cfg#*:}; [ "$x" = "$cfg" ] && x=""
    E2=""; [ $c != default ] && E2="KILN_WGMMA_CFG=$c"
    case $x in s2) E2="$E2 KILN_WGMMA_SPLITS=2 KILN_WGMMA_TAIL=0";; s4) E2="$E2 KILN_WGMMA_SPLITS=4 KILN_WGMMA_TAIL=0";; esac
    echo "{\"cfg\":\"$cfg\",\"shape\":\"$s $l\"}" >> $OUT/sweep.jsonl
    timeout 60 env $E2 $K --no-store --json bench --shape $s --layout $l --reps 20 >> $OUT/sweep.jsonl 2>> $OUT/err.txt
  done
done
sed -n '/^table() {/,/^}/p' scripts/gpu-widths.sh > /tmp/table.sh; source /tmp/table.sh
table $OUT/sweep.jsonl | tee $OUT/sweep.txt
