#!/usr/bin/env bash
# Session 23 run 2 (binary 97f9b4a, .carry/lean): the lean variant (KILN_SPLITK=0, unsplit
# launches' default) against the split variant forced for the same launches
# (KILN_WGMMA_SPLITK=1, what every launch ran before), over the target set's shapes whose
# heuristic launch is an unsplit cooperative tile, in four processes each rotated (A B B A);
# scripts/ab-table.py: median kiln time per variant and the paired ratio to cuBLAS.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/lean-ab; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
D=.carry/lean; S=$D/kiln; chmod +x $S
save() { tar czf $FINAL/lean-ab.tgz -C /tmp lean-ab; }
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,driver_version --format=csv; date -u; echo "binary: $(cat $D/COMMIT)"; } > $OUT/machine.txt
b() { timeout 90 $S --no-store --json bench "$@" 2>> $OUT/err.txt; }
: > $OUT/ab.jsonl
for sl in "4096x4096x4096 RC" "8192x8192x8192 RC" "4000x4000x4000 RC" "4096x4096x4088 RC" "128x128256x4096 RC" \
          "512x14336x4096 RC" "2048x4096x4096 RC" "2048x14336x4096 RC" "2048x4096x14336 RC" "2048x128256x4096 RC" \
          "8192x4096x4096 RC" "8192x4096x14336 RC" "8192x128256x4096 RC" "4096x4096x4096 CR" "4096x4096x4096 CC"; do
  set -- $sl
  for v in lean split split lean; do
    e=0; [ $v = split ] && e=1
    echo "{\"cfg\":\"$v\",\"shape\":\"$1 $2\"}" >> $OUT/ab.jsonl
    KILN_WGMMA_SPLITK=$e b --shape $1 --layout $2 --reps 30 >> $OUT/ab.jsonl
  done
  save
done
python3 scripts/ab-table.py $OUT/ab.jsonl | tee $OUT/ab.txt
save
