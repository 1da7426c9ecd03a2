#!/usr/bin/env bash
# Session 19 run 5 (ledger #80): binary t = s + f32 C through the TMA-store epilogue in the
# ping-pong kernel too (the staging writes moved to common/c_staging.cuh). (1) A/B q (f32 C from
# registers everywhere) against t, rotated q t t q q t t q, at shapes the ping-pong tiles run
# with f32 C, and two cooperative ones. (2) scripts/gpu-ws-check.sh on t: the full suite, the
# MoE quick suite, sanitize --configs (61 setups, f32 C through TMA stores and from registers).
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/r5; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
D=.carry/s19; chmod +x $D/kiln-q $D/kiln-t
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binaries: q = $(cat $D/COMMIT-q); t = $(cat $D/COMMIT-t)"; } > $OUT/machine.txt
sed -n '/^table() {/,/^}/p' scripts/gpu-widths.sh > /tmp/table.sh; source /tmp/table.sh
t0=$SECONDS
: > $OUT/ab.jsonl
for sl in 2048x2048x2048:RC 512x4096x4096:RC 2048x2048x2048:CC 1024x1024x1024:RC 128x4096x14336:RC 256x256x4096:RC 96x4096x4096:RC 2048x4096x1024:RC 4096x4096x4096:RC 4000x4000x4000:RC; do
  IFS=: read s l <<< "$sl"
  for b in q t t q q t t q; do
    echo "{\"cfg\":\"$b\",\"shape\":\"$s $l f32\"}" >> $OUT/ab.jsonl
    timeout 60 $D/kiln-$b --no-store --json bench --shape $s --layout $l --out f32 --reps 20 >> $OUT/ab.jsonl 2>> $OUT/err.txt
  done
  echo "== $s $l f32: $($D/kiln-t plan --shape $s --layout $l --out f32 | grep -E '^runs:')" >> $OUT/plans.txt
done
echo "A/B: $((SECONDS - t0)) s"
table $OUT/ab.jsonl | tee $OUT/ab.txt
cat $OUT/plans.txt
tar czf $FINAL/r5.tgz -C /tmp r5
OUT=$FINAL bash scripts/gpu-ws-check.sh
