#!/usr/bin/env bash
# Session 19 run 2 (binary q = m + the few-tile rule with its column guard, and 1000x1000x4008
# in the full suite). (1) A/B m against q, default dispatch, rotated m q q m m q q m (median of
# four: run 1 met one run in which kiln and cuBLAS were both 3x slow), at shapes the rule now
# takes or leaves. (2) scripts/gpu-ws-check.sh on q: full suite, MoE quick suite, sanitize
# --configs (the 9f42802 refactor's first GPU run too).
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/r2; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
D=.carry/s19; chmod +x $D/kiln-m $D/kiln-q
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binaries: m = $(cat $D/COMMIT-m); q = $(cat $D/COMMIT-q)"; } > $OUT/machine.txt
sed -n '/^table() {/,/^}/p' scripts/gpu-widths.sh > /tmp/table.sh; source /tmp/table.sh
t0=$SECONDS
: > $OUT/ab.jsonl
for sl in 760x760x8008:RC 1400x600x4008:RC 1000x2000x5000:RR 1000x1000x4008:CR 1000x1000x4008:RR 1000x1000x4008:CC 1200x1000x10008:CC 1000x760x6008:RR 520x520x8008:RC; do
  s=${sl%:*}; l=${sl#*:}
  for b in m q q m m q q m; do
    echo "{\"cfg\":\"$b\",\"shape\":\"$s $l\"}" >> $OUT/ab.jsonl
    timeout 60 $D/kiln-$b --no-store --json bench --shape $s --layout $l --reps 20 >> $OUT/ab.jsonl 2>> $OUT/err.txt
  done
  echo "== $s $l: $($D/kiln-q plan --shape $s --layout $l | grep -E '^runs:')" >> $OUT/plans.txt
done
echo "A/B: $((SECONDS - t0)) s"
table $OUT/ab.jsonl | tee $OUT/ab.txt
cat $OUT/plans.txt
OUT=$FINAL bash scripts/gpu-ws-check.sh
tar czf $FINAL/r2.tgz -C /tmp r2
