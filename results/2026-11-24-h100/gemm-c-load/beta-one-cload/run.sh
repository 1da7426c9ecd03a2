#!/usr/bin/env bash
# Session 21 run 7: beta = 1 on the final build (c662878), TMA's reduce-add (r, the default)
# against C loaded into the staging chunks (c, KILN_WGMMA_CLOAD=1, with #86's hidden first
# loads), rotated r c c r x 2. Does the loaded C now beat the reduce-add anywhere?
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/r7; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
K=.carry/check/kiln; chmod +x $K
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: $(cat .carry/check/COMMIT)"; } > $OUT/machine.txt
save() { tar czf $FINAL/r7.tgz -C /tmp r7; }
sed -n '/^table() {/,/^}/p' scripts/gpu-widths.sh > /tmp/table.sh; source /tmp/table.sh
: > $OUT/ab.jsonl
for sl in 4096x4096x4096:RC:bf16 4096x4096x4096:RC:f32 2048x2048x2048:RC:bf16 512x4096x4096:RC:bf16 2048x2048x2048:RC:f32 8192x8192x8192:RC:bf16; do
  IFS=: read s l o <<< "$sl"
  for x in r c c r r c c r; do
    echo "{\"cfg\":\"$x\",\"shape\":\"$s $l $o b1\"}" >> $OUT/ab.jsonl
    if [ $x = c ]; then e=1; else e=0; fi
    KILN_WGMMA_CLOAD=$e timeout 30 $K --no-store --json bench --shape $s --layout $l --out $o --beta 1 --reps 20 >> $OUT/ab.jsonl 2>> $OUT/err.txt
  done
  save
done
KILN_WGMMA_CLOAD=1 $K --no-store plan --shape 4096 --beta 1 > $OUT/plan-cload.txt 2>&1
table $OUT/ab.jsonl | tee $OUT/ab.txt
save
