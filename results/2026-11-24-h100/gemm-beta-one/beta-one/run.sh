#!/usr/bin/env bash
# Session 20 run 1 (ledger #81): beta = 1 through the TMA-store epilogue (TMA's reduce-add adds
# the staged chunks to C; before, beta != 0 took the register epilogue, reading C). Binaries:
# m = main at the session's start, n = m + the reduce-add. (1) n verified with every tile config
# forced at beta = 1 (f32 and bf16 C), whole, split 3, last-wave split and stream-K, four
# layouts, and at large shapes; also beta = 0.5 (still from registers). (2) A/B m against n,
# rotated m n n m m n n m, at beta = 1 over 10 shapes and a beta = 0 control.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/r1; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
D=.carry/s20; chmod +x $D/kiln-m $D/kiln-n
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binaries: m = $(cat $D/COMMIT-m); n = $(cat $D/COMMIT-n)"; } > $OUT/machine.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 200 > $OUT/clocks.csv 2>&1 &
SMI=$!
S=$D/kiln-n
t0=$SECONDS; fails=0; n=0
v() { # name, env..., then -- and verify's arguments
  local name=$1; shift; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  n=$((n+1))
  if ! env "${envs[@]}" timeout 60 $S --no-store verify --version wgmma_tma_ws "$@" >> $OUT/verify-beta.txt 2>&1; then fails=$((fails+1)); echo "FAIL: $name $*" | tee -a $OUT/verify-beta-fails.txt; fi
}
for l in RC CR RR CC; do
  for o in f32 bf16; do
    for c in large medium pair medium-pair wide n168 n224 small tiny tiny64 pingpong pingpong64 pingpong-tiny; do
      v "$c whole $o" KILN_WGMMA_CFG=$c KILN_WGMMA_SPLITS=1 -- --shape 1000x1504x700 --layout $l --out $o --alpha 0.75 --beta 1
    done
    for c in large medium-pair small; do
      v "$c split 3 $o" KILN_WGMMA_CFG=$c KILN_WGMMA_SPLITS=3 KILN_WGMMA_TAIL=0 -- --shape 600x1344x640 --layout $l --out $o --beta 1
    done
    v "large last-wave $o" KILN_WGMMA_CFG=large KILN_WGMMA_SPLITS=3 KILN_WGMMA_TAIL=1 KILN_WGMMA_GRID=4 -- --shape 1000x1504x700 --layout $l --out $o --beta 1
    v "large stream-K $o" KILN_WGMMA_CFG=large KILN_WGMMA_SK=1 KILN_WGMMA_GRID=4 -- --shape 1000x1504x700 --layout $l --out $o --beta 1
  done
  v "default f16 in f16 out" -- --shape 1000x1504x700 --layout $l --dtype f16 --out f16 --beta 1
  v "default beta 0.5 (registers)" -- --shape 1000x1504x700 --layout $l --out f32 --beta 0.5
done
v "4096^3 f32" -- --shape 4096x4096x4096 --out f32 --beta 1
v "4096^3 bf16" -- --shape 4096x4096x4096 --beta 1
v "8192x4096x4096 CR f32" -- --shape 8192x4096x4096 --layout CR --out f32 --beta 1
v "4000^3 pairs" -- --shape 4000x4000x4000 --out f32 --beta 1
v "1000x1000x4008 split pairs" -- --shape 1000x1000x4008 --out f32 --beta 1
v "128x4096x14336" -- --shape 128x4096x14336 --beta 1
echo "beta = 1 forced verifies ($((SECONDS - t0)) s): $n run, $fails failed"
grep -c "KILN_WGMMA_CFG" $OUT/verify-beta.txt > /dev/null 2>&1
t0=$SECONDS
sed -n '/^table() {/,/^}/p' scripts/gpu-widths.sh > /tmp/table.sh; source /tmp/table.sh
: > $OUT/ab.jsonl
for sl in 4096x4096x4096:RC:f32:1 4096x4096x4096:RC:bf16:1 8192x8192x8192:RC:bf16:1 8192x8192x8192:RC:f32:1 2048x2048x2048:RC:f32:1 4000x4000x4000:RC:f32:1 512x4096x4096:RC:bf16:1 128x4096x14336:RC:bf16:1 1000x1000x4008:RC:f32:1 4096x4096x4096:CR:f32:1 4096x4096x4096:RC:bf16:0; do
  IFS=: read s l o b <<< "$sl"
  for x in m n n m m n n m; do
    echo "{\"cfg\":\"$x\",\"shape\":\"$s $l $o b$b\"}" >> $OUT/ab.jsonl
    timeout 60 $D/kiln-$x --no-store --json bench --shape $s --layout $l --out $o --beta $b --reps 20 >> $OUT/ab.jsonl 2>> $OUT/err.txt
  done
  echo "== $s $l $o beta $b: $($S plan --shape $s --layout $l --out $o --beta $b | grep -E '^runs:|epilogue:')" >> $OUT/plans.txt
done
echo "A/B: $((SECONDS - t0)) s"
kill $SMI
table $OUT/ab.jsonl | tee $OUT/ab.txt
cat $OUT/plans.txt
tar czf $FINAL/r1.tgz -C /tmp r1
