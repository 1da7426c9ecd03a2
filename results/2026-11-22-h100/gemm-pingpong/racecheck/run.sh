#!/usr/bin/env bash
# Session 12 run 12: the racecheck report on TINY64's hand-off (ledger #41) in full, with main's
# binary (959c830: consumer 1 bar.arrive's, consumer 0 bar.sync's) and an experiment binary whose
# consumer 1 bar.sync's instead (xsync.diff), at the two shapes that reported it.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; $CS --version | tail -1; echo "main: $(cat .carry/s12/commit-final); xsync: main + xsync.diff"; } > $OUT/machine.txt
for b in kiln-final kiln-xsync; do
  B=.carry/s12/$b; chmod +x $B
  for sl in "129x127x72 RC bf16 bf16" "64x40x96 CR f16 f32"; do
    read s l d o <<< "$sl"
    $B --no-store verify --version wgmma_tma_ws --shape $s --layout $l --dtype $d --out $o > /dev/null 2>&1  # compile outside the sanitizer
    echo "== $b $s $l $d->$o" >> $OUT/race.txt
    timeout 200 $CS --tool racecheck --racecheck-report all $B --no-store verify --version wgmma_tma_ws --shape $s --layout $l --dtype $d --out $o >> $OUT/race.txt 2>&1
    echo "$b $s $l $d->$o: rc $? ; $(grep -c 'Race reported\|Error' $OUT/race.txt) error lines so far"
  done
done
grep -E "^==|RACECHECK SUMMARY|Race reported|Write|Read|hazard" $OUT/race.txt | head -60
