#!/usr/bin/env bash
# Session 17 run 3: the 224-wide rule on by default (binary a = main f224e2e + the rule, N a
# multiple of 224; 168 forced only). Forced n224 checks at the decode shapes the rule now takes
# (M = 1, 16, 128 at N = 28672), the full suite by default; then the rule off (KILN_WGMMA_WIDTHS=0)
# against on at every shape whose pick it changes, rotated off on on off.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
K=.carry/s17/kiln-a; chmod +x $K
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: a (f224e2e + 224 rule)"; } > $OUT/machine.txt
: > $OUT/verify.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; timeout 300 env "$@" >> $OUT/verify.txt 2>&1; echo "verify $tag rc $?: $(grep -E '^\| wgmma_tma_ws ' $OUT/verify.txt | tail -1)"; }
v "full suite, default" $K --no-store verify --version wgmma_tma_ws --suite full
for l in RC CR RR CC; do
  for s in 1x28672x8192 16x28672x8192 128x28672x8192 4096x3584x18944; do
    v "default $l $s" $K --no-store verify --version wgmma_tma_ws --shape $s --layout $l
  done
  v "n224 $l 5x28672x1000" KILN_WGMMA_CFG=n224 $K --no-store verify --version wgmma_tma_ws --shape 5x28672x1000 --layout $l
done
echo "verify: $(grep -cE '^\| wgmma_tma_ws +\| [0-9]+ +\| 0 ' $OUT/verify.txt) of $(grep -c '^==' $OUT/verify.txt) pass"
: > $OUT/ab.jsonl
for s in 1x28672x8192:RC 1x28672x8192:CR 1x28672x8192:RR 1x28672x8192:CC 16x28672x8192:RC 16x28672x8192:CR 16x28672x8192:RR 128x28672x8192:RC 128x28672x8192:CR 128x28672x8192:RR 128x28672x8192:CC 1024x3584x18944:RR 4096x3584x18944:CR 4096x3584x18944:RR 4096x3584x18944:CC 512x14336x4096:RC 2048x3584x3584:RC 2048x3584x3584:CR; do
  for w in 0 1 1 0; do
    echo "{\"cfg\":\"w$w\",\"shape\":\"${s%:*} ${s#*:}\"}" >> $OUT/ab.jsonl
    timeout 60 env KILN_WGMMA_WIDTHS=$w $K --no-store --json bench --shape ${s%:*} --layout ${s#*:} --reps 20 >> $OUT/ab.jsonl 2>> $OUT/err.txt
  done
done
sed -n '/^table() {/,/^}/p' scripts/gpu-widths.sh > /tmp/table.sh; source /tmp/table.sh
table $OUT/ab.jsonl | tee $OUT/ab.txt
