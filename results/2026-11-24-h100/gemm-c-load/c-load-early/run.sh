#!/usr/bin/env bash
# Session 21 run 5: e = g + a whole tile's first two C loads issued by the consumer's leader
# after its first K block's wgmmas are committed (ping-pong: after the turn), so the tile
# decoding runs under the tensor cores (#84's h issued them before the first wgmma).
# 64 forced C-load checks of e, then A/B g h e at beta 0.5 and a beta = 0 control, rotated
# g h e e h g x 2.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/r5; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
D=/tmp/bin; mkdir -p $D; for f in .carry/s21e/kiln-*.gz; do b=$(basename $f .gz); gunzip -c $f > $D/$b; done; chmod +x $D/kiln-*
S=$D/kiln-e
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "g = 0ab046e, h = b6d5fe8, e = g + e-loads-under-first-wgmma.patch"; } > $OUT/machine.txt
save() { tar czf $FINAL/r5.tgz -C /tmp r5; }
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
sed -n '/^table() {/,/^}/p' scripts/gpu-widths.sh > /tmp/table.sh; source /tmp/table.sh
: > $OUT/ab.jsonl
for sl in 4096x4096x4096:RC:bf16:0.5 2048x2048x2048:RC:bf16:0.5 512x4096x4096:RC:bf16:0.5 4096x4096x4096:RC:f32:0.5 4096x4096x4096:RC:bf16:0; do
  IFS=: read s l o b <<< "$sl"
  for x in g h e e h g g h e e h g; do
    echo "{\"cfg\":\"$x\",\"shape\":\"$s $l $o b$b\"}" >> $OUT/ab.jsonl
    timeout 30 $D/kiln-$x --no-store --json bench --shape $s --layout $l --out $o --beta $b --reps 20 >> $OUT/ab.jsonl 2>> $OUT/err.txt
  done
  save
done
table $OUT/ab.jsonl | tee $OUT/ab.txt
save
