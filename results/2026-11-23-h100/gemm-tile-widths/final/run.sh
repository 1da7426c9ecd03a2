#!/usr/bin/env bash
# Session 17 run 4: the narrowed 224-wide rule (binary b: N a multiple of 224, two tile-rows,
# an MN-major B at most two waves). Checks at the shapes it newly takes, the rule off against on
# where run 3 did not time it (rotated off on on off), then issue 3's target set in four layouts.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
K=.carry/s17/kiln-b; chmod +x $K
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: b (f224e2e + narrowed 224 rule)"; } > $OUT/machine.txt
: > $OUT/verify.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; timeout 300 env "$@" >> $OUT/verify.txt 2>&1; echo "verify $tag rc $?: $(grep -E '^\| wgmma_tma_ws ' $OUT/verify.txt | tail -1)"; }
for l in RC CR RR CC; do
  for s in 256x14336x4096 1024x7168x7168; do v "default $l $s" $K --no-store verify --version wgmma_tma_ws --shape $s --layout $l; done
done
echo "verify: $(grep -cE '^\| wgmma_tma_ws +\| [0-9]+ +\| 0 ' $OUT/verify.txt) of $(grep -c '^==' $OUT/verify.txt) pass"
: > $OUT/ab.jsonl
for s in 4096x3584x18944:RC 2048x3584x18944:RC 2048x3584x18944:CR 2048x3584x18944:RR 1024x7168x7168:RC 1024x7168x7168:RR 256x14336x4096:RC 256x14336x4096:RR 2048x3584x3584:RR; do
  for w in 0 1 1 0; do
    echo "{\"cfg\":\"w$w\",\"shape\":\"${s%:*} ${s#*:}\"}" >> $OUT/ab.jsonl
    timeout 60 env KILN_WGMMA_WIDTHS=$w $K --no-store --json bench --shape ${s%:*} --layout ${s#*:} --reps 20 >> $OUT/ab.jsonl 2>> $OUT/err.txt
  done
done
sed -n '/^table() {/,/^}/p' scripts/gpu-widths.sh > /tmp/table.sh; source /tmp/table.sh
table $OUT/ab.jsonl | tee $OUT/ab.txt
timeout 300 $K --no-store --json bench --set targets --layouts RC,CR,RR,CC --reps 30 > $OUT/targets.json 2>>$OUT/err.txt
echo "targets rc $?"
sed -n '/^python3 - \$OUT\/targets.json/,/^PY$/p' results/2026-11-23-h100/session15/final/run.sh > /tmp/targets.sh
OUT=$OUT bash /tmp/targets.sh
