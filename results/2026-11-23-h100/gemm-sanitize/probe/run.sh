#!/usr/bin/env bash
# Session 18 run 1 (binary m = main d1f96d5): (1) compute-sanitizer on the forced 128x224 and
# 128x168 tiles at problems they really run (`kiln plan`: C rows 16-byte aligned), with split-K
# and stream-K on the 224; (2) the forced-fallback warning; (3) few-tile, long-K problems with
# rows off lines (1000x1000x4000 at 0.64-0.71x): pairs and splits forced, never timed there;
# (4) the same problems with K stepped through 16-, 32-, 64- and 128-byte row alignment.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
K=.carry/s18/kiln-m; chmod +x $K
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: m = main d1f96d5"; } > $OUT/machine.txt
: > $OUT/sweep.jsonl
for sl in 1000x1000x4000:RC 1000x1000x4000:CR 1000x1000x8000:RC 1000x1000x2000:RC 1000x1000x1000:RC; do
  s=${sl%:*}; l=${sl#*:}
  cfgs="default pair:s2 pair:s4 medium-pair:s2 medium-pair:s3 large:s4 medium:s2 small:s2"
  for cfg in $cfgs $(printf '%s\n' $cfgs | tac); do
    c=${cfg%%:*}; x=${cfg#*:}; [ "$x" = "$cfg" ] && x=""
    E2=""; [ $c != default ] && E2="KILN_WGMMA_CFG=$c"
    case $x in s2) E2="$E2 KILN_WGMMA_SPLITS=2 KILN_WGMMA_TAIL=0";; s3) E2="$E2 KILN_WGMMA_SPLITS=3 KILN_WGMMA_TAIL=0";; s4) E2="$E2 KILN_WGMMA_SPLITS=4 KILN_WGMMA_TAIL=0";; esac
    echo "{\"cfg\":\"$cfg\",\"shape\":\"$s $l\"}" >> $OUT/sweep.jsonl
    timeout 60 env $E2 $K --no-store --json bench --shape $s --layout $l --reps 20 >> $OUT/sweep.jsonl 2>> $OUT/err.txt
  done
done
sed -n '/^table() {/,/^}/p' scripts/gpu-widths.sh > /tmp/table.sh; source /tmp/table.sh
table $OUT/sweep.jsonl > $OUT/sweep.txt

: > $OUT/align.jsonl
# one config per family, forced, so that only the rows' alignment changes
for r in a b; do
  for s in 1000x1000x4000 1000x1000x4008 1000x1000x4016 1000x1000x4032 1000x1000x4064 3000x3000x3000 3000x3000x3008 3000x3000x3016 3000x3000x3040 3000x3000x3072; do
    c=pingpong; [ ${s%%x*} = 3000 ] && c=medium-pair
    echo "{\"cfg\":\"$c\",\"shape\":\"$s RC\"}" >> $OUT/align.jsonl
    timeout 60 env KILN_WGMMA_CFG=$c $K --no-store --json bench --shape $s --layout RC --reps 20 >> $OUT/align.jsonl 2>> $OUT/err.txt
  done
done
table $OUT/align.jsonl > $OUT/align.txt
cat $OUT/sweep.txt $OUT/align.txt
# the sanitizer last: what it has not finished when the call ends is what is lost
san() {  # tag, env..., then problems
  local tag=$1; shift; local t0=$SECONDS
  [ $SECONDS -gt 500 ] && { echo "sanitize $tag skipped: out of time"; return; }
  timeout 150 env "$@" > $OUT/sanitize-$tag.txt 2>&1
  echo "sanitize $tag rc $? in $((SECONDS - t0)) s: $(tail -1 $OUT/sanitize-$tag.txt)"
}
S="$K --no-store sanitize --version wgmma_tma_ws --timeout 120"
san n224 KILN_WGMMA_CFG=n224 $S --problem 300x2000x200:RC --problem 300x2000x200:RR --problem 129x344x72:CC
san n224-split KILN_WGMMA_CFG=n224 KILN_WGMMA_SPLITS=3 KILN_WGMMA_TAIL=1 KILN_WGMMA_GRID=4 $S --problem 600x1344x640:RC
san n224-sk KILN_WGMMA_CFG=n224 KILN_WGMMA_SK=1 KILN_WGMMA_GRID=4 $S --problem 600x1344x640:CC
san n168 KILN_WGMMA_CFG=n168 $S --problem 300x2000x200:RC --problem 300x2000x200:RR --problem 129x344x72:CC
# the warning of a forced tile that falls back (C rows of 1501 elements: not 16-byte aligned)
KILN_WGMMA_CFG=n224 timeout 120 $K --no-store verify --version wgmma_tma_ws --shape 1000x1501x700 > $OUT/fallback.txt 2> $OUT/fallback-stderr.txt
echo "fallback rc $?: stderr: $(head -3 $OUT/fallback-stderr.txt)"; grep -E '^\| wgmma_tma_ws ' $OUT/fallback.txt

