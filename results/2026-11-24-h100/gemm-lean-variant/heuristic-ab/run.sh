#!/usr/bin/env bash
# Session 23 run 6 (binary 97f9b4a, .carry/lean): the two heuristic misses of run 5 (#92), each
# one exhaustive timing, in a paired A/B (four processes each, A B B A): where rows straddle
# 128-byte lines the heuristic runs CTA pairs (#59), 4000^3 timed single CTAs 0.7 % faster; at
# 16384^3 the last-wave split 5 against stream-K (2.3 %). Neighbouring shapes of each kind too.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/hab; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
D=.carry/lean; S=$D/kiln; chmod +x $S
save() { tar czf $FINAL/hab.tgz -C /tmp hab; }
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,driver_version --format=csv; date -u; echo "binary: $(cat $D/COMMIT)"; } > $OUT/machine.txt
b() { timeout 120 $S --no-store --json bench "$@" 2>> $OUT/err.txt; }
: > $OUT/pairs.jsonl
for s in 4000x4000x4000 3000x3000x3000 6000x6000x6000 7000x7000x7000 8000x4000x4000 4000x14336x4000; do
  $S plan --shape $s 2>/dev/null | grep runs: | sed "s/^/$s /" >> $OUT/plans.txt
  for v in heuristic single single heuristic; do
    echo "{\"cfg\":\"$v\",\"shape\":\"$s RC\"}" >> $OUT/pairs.jsonl
    if [ $v = single ]; then KILN_WGMMA_PAIRS=0 b --shape $s --reps 30 >> $OUT/pairs.jsonl; else b --shape $s --reps 30 >> $OUT/pairs.jsonl; fi
  done
  save
done
: > $OUT/sk.jsonl
for s in 16384x16384x16384 16384x16384x8192 12288x12288x12288 16384x8192x16384; do
  $S plan --shape $s 2>/dev/null | grep runs: | sed "s/^/$s /" >> $OUT/plans.txt
  KILN_WGMMA_SK=1 $S plan --shape $s 2>/dev/null | grep runs: | sed "s/^/$s SK=1: /" >> $OUT/plans.txt
  for v in heuristic sk sk heuristic; do
    echo "{\"cfg\":\"$v\",\"shape\":\"$s RC\"}" >> $OUT/sk.jsonl
    if [ $v = sk ]; then KILN_WGMMA_SK=1 b --shape $s --reps 20 >> $OUT/sk.jsonl; else b --shape $s --reps 20 >> $OUT/sk.jsonl; fi
  done
  save
done
cat $OUT/plans.txt
python3 scripts/ab-table.py $OUT/pairs.jsonl | tee $OUT/pairs.txt
python3 scripts/ab-table.py $OUT/sk.jsonl | tee $OUT/sk.txt
save
