#!/usr/bin/env bash
# Session 18 run 6: 512x128256x4096 RC read 0.960x in the final target set (1.002 in session 17;
# its kernel splits the last wave, the path #77 changed). n against o, rotated n o o n o n n o.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
N=.carry/s18/kiln-n; O=.carry/s18/kiln-o; chmod +x $N $O
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binaries: n (before #77), o (final)"; } > $OUT/machine.txt
: > $OUT/ab.jsonl
for sl in 512x128256x4096:RC 512x128256x4096:CC; do
  s=${sl%:*}; l=${sl#*:}
  for b in n o o n o n n o; do
    B=$N; [ $b = o ] && B=$O
    echo "{\"cfg\":\"$b\",\"shape\":\"$s $l\"}" >> $OUT/ab.jsonl
    timeout 60 $B --no-store --json bench --shape $s --layout $l --reps 20 >> $OUT/ab.jsonl 2>> $OUT/err.txt
  done
done
sed -n '/^table() {/,/^}/p' scripts/gpu-widths.sh > /tmp/table.sh; source /tmp/table.sh
table $OUT/ab.jsonl | tee $OUT/ab.txt
