#!/usr/bin/env bash
# Session 20 run 11: binary f = branch c-load-epilogue with the fix #82 points to (each tile's
# epilogue ends with the leader's wait_group.read 0, right after its last store; none after the
# mainloop). Every config forced at beta 0.5 (f32, bf16; RC and CC), split, stream-K, under short
# timeouts; the full suite; then A/B m (registers) against f at beta 0.5, rotated m f f m x 2.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/r11; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
D=.carry/s20; S=$D/kiln-f; chmod +x $S $D/kiln-m
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binaries: m = $(cat $D/COMMIT-m); f = $(cat $D/COMMIT-f)"; } > $OUT/machine.txt
save() { tar czf $FINAL/r11.tgz -C /tmp r11; }
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
  timeout 120 $S --no-store verify --version wgmma_tma_ws --suite full > $OUT/verify-full.txt 2>&1
  echo "full suite rc $? ($((SECONDS - t0)) s): $(grep -E '^\| wgmma_tma_ws ' $OUT/verify-full.txt | tail -1)" | tee -a $OUT/summary.txt
  save
  sed -n '/^table() {/,/^}/p' scripts/gpu-widths.sh > /tmp/table.sh; source /tmp/table.sh
  : > $OUT/ab.jsonl
  for sl in 4096x4096x4096:RC:bf16 4096x4096x4096:RC:f32 2048x2048x2048:RC:bf16 512x4096x4096:RC:bf16; do
    IFS=: read s l o <<< "$sl"
    for x in m f f m m f f m; do
      echo "{\"cfg\":\"$x\",\"shape\":\"$s $l $o b0.5\"}" >> $OUT/ab.jsonl
      timeout 30 $D/kiln-$x --no-store --json bench --shape $s --layout $l --out $o --beta 0.5 --reps 20 >> $OUT/ab.jsonl 2>> $OUT/err.txt
    done
  done
  table $OUT/ab.jsonl | tee $OUT/ab.txt
  save
fi
