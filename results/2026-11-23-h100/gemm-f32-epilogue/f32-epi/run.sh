#!/usr/bin/env bash
# Session 19 run 4 (ledger #80): f32 C through the TMA-store epilogue. Binary s = the session's
# code + f32 staging (st.shared.v2 into 128B-swizzled 64 x 32 chunks, TMA stores); q = before it
# (f32 C from registers). (1) The full suite on s. (2) s verified with every tile config forced
# at f32 C, whole, split 3, last-wave split and stream-K, in four layouts, and at 4096^3 and
# 8192x4096x4096. (3) A/B q against s, rotated q s s q q s s q, f32 C at 11 shapes and a bf16
# control.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/r4; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
D=.carry/s19; chmod +x $D/kiln-q $D/kiln-s
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binaries: q = $(cat $D/COMMIT-q); s = $(cat $D/COMMIT-s)"; } > $OUT/machine.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 200 > $OUT/clocks.csv 2>&1 &
SMI=$!
S=$D/kiln-s
t0=$SECONDS
timeout 200 $S --no-store verify --version wgmma_tma_ws --suite full > $OUT/verify-full.txt 2>&1
echo "full suite ($((SECONDS - t0)) s): $(grep -E '^\| wgmma_tma_ws ' $OUT/verify-full.txt | tail -1)"
t0=$SECONDS; fails=0; n=0
v() { # name, env..., then --shape etc after --
  local name=$1; shift; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  n=$((n+1))
  if ! env "${envs[@]}" timeout 60 $S --no-store verify --version wgmma_tma_ws "$@" >> $OUT/verify-f32.txt 2>&1; then fails=$((fails+1)); echo "FAIL: $name $*" | tee -a $OUT/verify-f32-fails.txt; fi
}
for l in RC CR RR CC; do
  for c in large medium pair medium-pair wide n168 n224 small tiny tiny64; do
    v "$c whole" KILN_WGMMA_CFG=$c KILN_WGMMA_SPLITS=1 -- --shape 1000x1504x700 --layout $l --out f32
  done
  for c in large medium-pair small; do
    v "$c split 3" KILN_WGMMA_CFG=$c KILN_WGMMA_SPLITS=3 KILN_WGMMA_TAIL=0 -- --shape 600x1344x640 --layout $l --out f32
  done
  v "large last-wave" KILN_WGMMA_CFG=large KILN_WGMMA_SPLITS=3 KILN_WGMMA_TAIL=1 KILN_WGMMA_GRID=4 -- --shape 1000x1504x700 --layout $l --out f32
  v "large stream-K" KILN_WGMMA_CFG=large KILN_WGMMA_SK=1 KILN_WGMMA_GRID=4 -- --shape 1000x1504x700 --layout $l --out f32
  v "default f16 in" -- --shape 1000x1504x700 --layout $l --dtype f16 --out f32
done
v "4096^3" -- --shape 4096x4096x4096 --out f32
v "8192x4096x4096 CR" -- --shape 8192x4096x4096 --layout CR --out f32
v "4000^3 pairs" -- --shape 4000x4000x4000 --out f32
echo "f32 forced verifies ($((SECONDS - t0)) s): $n run, $fails failed"
t0=$SECONDS
sed -n '/^table() {/,/^}/p' scripts/gpu-widths.sh > /tmp/table.sh; source /tmp/table.sh
: > $OUT/ab.jsonl
for sl in 4096x4096x4096:RC:f32 8192x8192x8192:RC:f32 4000x4000x4000:RC:f32 2048x2048x2048:RC:f32 4096x4096x4096:CR:f32 512x4096x4096:RC:f32 8192x14336x4096:RC:f32 4096x4096x4088:RC:f32 1000x1000x4008:RC:f32 128x4096x14336:RC:f32 256x256x4096:RC:f32 4096x4096x4096:RC:bf16; do
  IFS=: read s l o <<< "$sl"
  for b in q s s q q s s q; do
    echo "{\"cfg\":\"$b\",\"shape\":\"$s $l $o\"}" >> $OUT/ab.jsonl
    timeout 60 $D/kiln-$b --no-store --json bench --shape $s --layout $l --out $o --reps 20 >> $OUT/ab.jsonl 2>> $OUT/err.txt
  done
  echo "== $s $l $o: $($S plan --shape $s --layout $l --out $o | grep -E '^runs:')" >> $OUT/plans.txt
done
echo "A/B: $((SECONDS - t0)) s"
kill $SMI
table $OUT/ab.jsonl | tee $OUT/ab.txt
cat $OUT/plans.txt
tar czf $FINAL/r4.tgz -C /tmp r4
