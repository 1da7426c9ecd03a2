#!/usr/bin/env bash
# Session 21 run 2: the C-load epilogue, 2 x 2: g (0ab046e: C loads issued at the epilogue),
# h (+ a whole tile's first two C loads at its K loop's start), p (g + the producer hints each
# tile's C into L2 16 K blocks before the tile's end), q (h + that hint). Forced C-load checks of
# p and q (every config, RC, bf16 and f32 at beta 0.5; split; stream-K), then A/B at beta 0.5
# over five shapes and a beta = 0 control, rotated g h p q q p h g x 2.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/r2; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
D=/tmp/bin; mkdir -p $D; for f in .carry/s21z/kiln-*.gz; do b=$(basename $f .gz); gunzip -c $f > $D/$b; done; cp .carry/s21z/COMMIT-* $D/; chmod +x $D/kiln-*
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; for x in g h p q; do echo "$x = $(cat $D/COMMIT-$x)"; done; } > $OUT/machine.txt
save() { tar czf $FINAL/r2.tgz -C /tmp r2; }
n=0; fails=0
v() {
  local S=$D/kiln-$1; local name="$1 $2"; shift 2; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  n=$((n+1))
  env "${envs[@]}" timeout 20 $S --no-store verify --version wgmma_tma_ws "$@" >> $OUT/verify.txt 2>&1
  local rc=$?
  if [ $rc != 0 ]; then fails=$((fails+1)); echo "FAIL rc $rc: $name $*" | tee -a $OUT/fails.txt; fi
}
t0=$SECONDS
for x in p q; do
  for o in bf16 f32; do
    for c in large medium pair medium-pair wide n168 n224 small tiny tiny64 pingpong pingpong64 pingpong-tiny; do
      v $x "$c $o" KILN_WGMMA_CFG=$c KILN_WGMMA_SPLITS=1 -- --shape 1000x1504x700 --layout RC --out $o --alpha 0.75 --beta 0.5
    done
    v $x "large split 3 $o" KILN_WGMMA_CFG=large KILN_WGMMA_SPLITS=3 KILN_WGMMA_TAIL=0 -- --shape 600x1344x640 --layout CC --out $o --beta -1.5
    v $x "large stream-K $o" KILN_WGMMA_CFG=large KILN_WGMMA_SK=1 KILN_WGMMA_GRID=4 -- --shape 1000x1504x700 --layout CC --out $o --beta 2
  done
done
echo "forced checks ($((SECONDS - t0)) s): $n run, $fails failed" | tee $OUT/summary.txt
save
sed -n '/^table() {/,/^}/p' scripts/gpu-widths.sh > /tmp/table.sh; source /tmp/table.sh
: > $OUT/ab.jsonl
for sl in 4096x4096x4096:RC:bf16:0.5 2048x2048x2048:RC:bf16:0.5 512x4096x4096:RC:bf16:0.5 4096x4096x4096:RC:f32:0.5 8192x8192x8192:RC:bf16:0.5 4096x4096x4096:RC:bf16:0; do
  IFS=: read s l o b <<< "$sl"
  for x in g h p q q p h g g h p q q p h g; do
    echo "{\"cfg\":\"$x\",\"shape\":\"$s $l $o b$b\"}" >> $OUT/ab.jsonl
    timeout 30 $D/kiln-$x --no-store --json bench --shape $s --layout $l --out $o --beta $b --reps 20 >> $OUT/ab.jsonl 2>> $OUT/err.txt
  done
  save
done
table $OUT/ab.jsonl | tee $OUT/ab.txt
save
