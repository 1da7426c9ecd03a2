#!/usr/bin/env bash
# Session 21 run 1: g = the C-load epilogue with its last wait inside store_chunk (0ab046e, no
# spills), h = g + a whole tile's first two C loads issued as its K loop starts (b6d5fe8).
# 64 forced C-load checks of h (beta 0.5, -1.5, 2; every config, RC and CC, f32 and bf16, split,
# stream-K), h's full suite, then A/B m (main, registers at beta 0.5) g h at beta 0.5 and two
# beta = 0 controls, rotated m g h h g m x 2.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/r1; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
D=.carry/s21; S=$D/kiln-h; chmod +x $D/kiln-*
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binaries: m = $(cat $D/COMMIT-m); g = $(cat $D/COMMIT-g); h = $(cat $D/COMMIT-h)"; } > $OUT/machine.txt
save() { tar czf $FINAL/r1.tgz -C /tmp r1; }
n=0; fails=0
v() {
  local name=$1; shift; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  n=$((n+1))
  env "${envs[@]}" timeout 20 $S --no-store verify --version wgmma_tma_ws "$@" >> $OUT/verify.txt 2>&1
  local rc=$?
  if [ $rc != 0 ]; then fails=$((fails+1)); echo "FAIL rc $rc: $name $*" | tee -a $OUT/fails.txt; fi
}
t0=$SECONDS
for l in RC CC; do
  for o in f32 bf16; do
    for c in large medium pair medium-pair wide n168 n224 small tiny tiny64 pingpong pingpong64 pingpong-tiny; do
      v "$c $l $o" KILN_WGMMA_CFG=$c KILN_WGMMA_SPLITS=1 -- --shape 1000x1504x700 --layout $l --out $o --alpha 0.75 --beta 0.5
    done
    v "large split 3 $l $o" KILN_WGMMA_CFG=large KILN_WGMMA_SPLITS=3 KILN_WGMMA_TAIL=0 -- --shape 600x1344x640 --layout $l --out $o --beta -1.5
    v "large stream-K $l $o" KILN_WGMMA_CFG=large KILN_WGMMA_SK=1 KILN_WGMMA_GRID=4 -- --shape 1000x1504x700 --layout $l --out $o --beta 2
    v "pingpong grid 4 $l $o" KILN_WGMMA_CFG=pingpong KILN_WGMMA_GRID=4 -- --shape 1000x1504x700 --layout $l --out $o --beta 0.5
    if [ $fails -gt 3 ]; then break 2; fi
  done
done
echo "forced C-load checks ($((SECONDS - t0)) s): $n run, $fails failed" | tee $OUT/summary.txt
save
if [ $fails -eq 0 ]; then
  t0=$SECONDS
  timeout 150 $S --no-store verify --version wgmma_tma_ws --suite full > $OUT/verify-full.txt 2>&1
  echo "full suite rc $? ($((SECONDS - t0)) s): $(grep -E '^\| wgmma_tma_ws ' $OUT/verify-full.txt | tail -1)" | tee -a $OUT/summary.txt
  save
  sed -n '/^table() {/,/^}/p' scripts/gpu-widths.sh > /tmp/table.sh; source /tmp/table.sh
  : > $OUT/ab.jsonl
  for sl in 4096x4096x4096:RC:bf16:0.5 2048x2048x2048:RC:bf16:0.5 512x4096x4096:RC:bf16:0.5 4096x4096x4096:RC:f32:0.5 4096x4096x4096:RC:bf16:0 2048x2048x2048:RC:bf16:0; do
    IFS=: read s l o b <<< "$sl"
    for x in m g h h g m m g h h g m; do
      echo "{\"cfg\":\"$x\",\"shape\":\"$s $l $o b$b\"}" >> $OUT/ab.jsonl
      timeout 30 $D/kiln-$x --no-store --json bench --shape $s --layout $l --out $o --beta $b --reps 20 >> $OUT/ab.jsonl 2>> $OUT/err.txt
    done
    save
  done
  table $OUT/ab.jsonl | tee $OUT/ab.txt
  save
fi
