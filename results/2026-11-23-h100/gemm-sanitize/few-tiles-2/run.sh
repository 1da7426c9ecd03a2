#!/usr/bin/env bash
# Session 18 run 9 (binary o): #78 at ten more shapes with 16-byte rows, under a wave of 128x128
# tiles and K 2008-8008 (5-12 tile-rows), for a rule: the default against pairs with split-K,
# forced. Rotated a b b a.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
K=.carry/s18/kiln-o; chmod +x $K
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: o (session 18 final kernels)"; } > $OUT/machine.txt
: > $OUT/sweep.jsonl
for sl in 760x1000x4008:RC 1000x1000x3000:RC 1240x1000x4008:RC 1000x1240x4000:CR 760x760x8008:RC 1512x1000x3000:RC 1000x1000x2008:RC 1000x1512x6000:CR 520x520x8008:RC 1000x520x4000:CR; do
  s=${sl%:*}; l=${sl#*:}
  cfgs="default pair:s2 pair:s4 medium-pair:s2 medium-pair:s3"
  for cfg in $cfgs $(printf '%s\n' $cfgs | tac); do
    c=${cfg%%:*}; x=${cfg#*:}; [ "$x" = "$cfg" ] && x=""
    E2=""; [ $c != default ] && E2="KILN_WGMMA_CFG=$c"
    case $x in s2) E2="$E2 KILN_WGMMA_SPLITS=2 KILN_WGMMA_TAIL=0";; s3) E2="$E2 KILN_WGMMA_SPLITS=3 KILN_WGMMA_TAIL=0";; s4) E2="$E2 KILN_WGMMA_SPLITS=4 KILN_WGMMA_TAIL=0";; esac
    echo "{\"cfg\":\"$cfg\",\"shape\":\"$s $l\"}" >> $OUT/sweep.jsonl
    timeout 60 env $E2 $K --no-store --json bench --shape $s --layout $l --reps 20 >> $OUT/sweep.jsonl 2>> $OUT/err.txt
  done
done
sed -n '/^table() {/,/^}/p' scripts/gpu-widths.sh > /tmp/table.sh; source /tmp/table.sh
table $OUT/sweep.jsonl | tee $OUT/sweep.txt
