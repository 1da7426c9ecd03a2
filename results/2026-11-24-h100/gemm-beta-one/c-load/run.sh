#!/usr/bin/env bash
# Session 20 run 3 (ledger #82): beta other than 0 and 1 through the TMA-store epilogue, C loaded
# by TMA into the staging chunks two chunks ahead and blended (KILN_EPI = 2); before, those betas
# took the register epilogue. Binaries: m = main at the session's start (registers), n = + the
# beta = 1 reduce-add (#81), c = n + the C-load epilogue. (1) c: the full suite (24 beta = -0.5
# problems now), every tile config forced at beta 0.5 (f32 and bf16 C, four layouts), split 3,
# last-wave split, stream-K, f16, large shapes; beta = 1 with KILN_WGMMA_CLOAD=1. (2) A/B m
# against c at beta 0.5, rotated m c c m m c c m. (3) At beta = 1, 16-bit C: TMA's reduce-add
# (c) against C loaded (c with KILN_WGMMA_CLOAD=1, "L"), rotated c L L c c L L c.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/r3; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
D=.carry/s20; chmod +x $D/kiln-m $D/kiln-c
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binaries: m = $(cat $D/COMMIT-m); c = $(cat $D/COMMIT-c)"; } > $OUT/machine.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 200 > $OUT/clocks.csv 2>&1 &
SMI=$!
S=$D/kiln-c
t0=$SECONDS
timeout 200 $S --no-store verify --version wgmma_tma_ws --suite full > $OUT/verify-full.txt 2>&1
echo "full suite ($((SECONDS - t0)) s): $(grep -E '^\| wgmma_tma_ws ' $OUT/verify-full.txt | tail -1)"
t0=$SECONDS; fails=0; n=0
v() { # name, env..., then -- and verify's arguments
  local name=$1; shift; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  n=$((n+1))
  if ! env "${envs[@]}" timeout 60 $S --no-store verify --version wgmma_tma_ws "$@" >> $OUT/verify-cload.txt 2>&1; then fails=$((fails+1)); echo "FAIL: $name $*" | tee -a $OUT/verify-cload-fails.txt; fi
}
for l in RC CR RR CC; do
  for o in f32 bf16; do
    for c in large medium pair medium-pair wide n168 n224 small tiny tiny64 pingpong pingpong64 pingpong-tiny; do
      v "$c whole $o" KILN_WGMMA_CFG=$c KILN_WGMMA_SPLITS=1 -- --shape 1000x1504x700 --layout $l --out $o --alpha 0.75 --beta 0.5
    done
    v "large split 3 $o" KILN_WGMMA_CFG=large KILN_WGMMA_SPLITS=3 KILN_WGMMA_TAIL=0 -- --shape 600x1344x640 --layout $l --out $o --beta -1.5
    v "medium-pair split 3 $o" KILN_WGMMA_CFG=medium-pair KILN_WGMMA_SPLITS=3 KILN_WGMMA_TAIL=0 -- --shape 600x1344x640 --layout $l --out $o --beta -1.5
    v "large last-wave $o" KILN_WGMMA_CFG=large KILN_WGMMA_SPLITS=3 KILN_WGMMA_TAIL=1 KILN_WGMMA_GRID=4 -- --shape 1000x1504x700 --layout $l --out $o --beta 2
    v "large stream-K $o" KILN_WGMMA_CFG=large KILN_WGMMA_SK=1 KILN_WGMMA_GRID=4 -- --shape 1000x1504x700 --layout $l --out $o --beta 2
    v "tiny64 grid 4 $o" KILN_WGMMA_CFG=tiny64 KILN_WGMMA_GRID=4 -- --shape 1000x1504x700 --layout $l --out $o --beta 0.5
    v "pingpong grid 4 $o" KILN_WGMMA_CFG=pingpong KILN_WGMMA_GRID=4 -- --shape 1000x1504x700 --layout $l --out $o --beta 0.5
  done
  v "default f16" -- --shape 1000x1504x700 --layout $l --dtype f16 --out f16 --beta 0.5
  v "beta 1 C loaded bf16" KILN_WGMMA_CLOAD=1 -- --shape 1000x1504x700 --layout $l --out bf16 --beta 1
  v "beta 1 C loaded f16 pingpong" KILN_WGMMA_CLOAD=1 KILN_WGMMA_CFG=pingpong -- --shape 1000x1504x700 --layout $l --out f16 --beta 1
done
v "4096^3 f32" -- --shape 4096x4096x4096 --out f32 --beta 0.5
v "4096^3 bf16" -- --shape 4096x4096x4096 --beta 0.5
v "8192x4096x4096 CR bf16" -- --shape 8192x4096x4096 --layout CR --beta -1
v "4000^3 pairs" -- --shape 4000x4000x4000 --out f32 --beta 0.5
v "1000x1000x4008 split pairs" -- --shape 1000x1000x4008 --beta 0.5
v "128x4096x14336" -- --shape 128x4096x14336 --beta 0.5
echo "C-load forced verifies ($((SECONDS - t0)) s): $n run, $fails failed"
t0=$SECONDS
sed -n '/^table() {/,/^}/p' scripts/gpu-widths.sh > /tmp/table.sh; source /tmp/table.sh
: > $OUT/ab.jsonl
for sl in 4096x4096x4096:RC:bf16 4096x4096x4096:RC:f32 8192x8192x8192:RC:bf16 2048x2048x2048:RC:bf16 4000x4000x4000:RC:bf16 512x4096x4096:RC:bf16 128x4096x14336:RC:bf16 4096x4096x4096:CR:bf16; do
  IFS=: read s l o <<< "$sl"
  for x in m c c m m c c m; do
    echo "{\"cfg\":\"$x\",\"shape\":\"$s $l $o b0.5\"}" >> $OUT/ab.jsonl
    timeout 60 $D/kiln-$x --no-store --json bench --shape $s --layout $l --out $o --beta 0.5 --reps 20 >> $OUT/ab.jsonl 2>> $OUT/err.txt
  done
  echo "== $s $l $o beta 0.5: $($S plan --shape $s --layout $l --out $o --beta 0.5 | grep -E '^runs:')" >> $OUT/plans.txt
done
echo "A/B beta 0.5: $((SECONDS - t0)) s"
table $OUT/ab.jsonl | tee $OUT/ab.txt
t0=$SECONDS
: > $OUT/ab-b1.jsonl
for sl in 4096x4096x4096:RC:bf16 8192x8192x8192:RC:bf16 2048x2048x2048:RC:bf16 512x4096x4096:RC:bf16 4096x4096x4096:RC:f16; do
  IFS=: read s l o <<< "$sl"
  for x in c L L c c L L c; do
    echo "{\"cfg\":\"$x\",\"shape\":\"$s $l $o b1\"}" >> $OUT/ab-b1.jsonl
    if [ $x = L ]; then e=KILN_WGMMA_CLOAD=1; else e=KILN_WGMMA_CLOAD=0; fi
    env $e timeout 60 $S --no-store --json bench --shape $s --layout $l --out $o --beta 1 --reps 20 >> $OUT/ab-b1.jsonl 2>> $OUT/err.txt
  done
done
echo "A/B beta 1, reduce-add against C loaded: $((SECONDS - t0)) s"
kill $SMI
table $OUT/ab-b1.jsonl | tee $OUT/ab-b1.txt
cat $OUT/plans.txt
tar czf $FINAL/r3.tgz -C /tmp r3
