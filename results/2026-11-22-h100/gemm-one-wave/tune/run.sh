#!/usr/bin/env bash
# Session 11 run 3: does any config of wgmma_tma_ws's space beat the heuristic at the suite's
# shapes under 0.95x cuBLAS? Exhaustive tune of each (verified candidates, watched worker), then
# the tuned pick against the heuristic (KILN_NO_TUNED=1), three rotated rounds, cuBLAS in each.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s11/kiln; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; cat .carry/s11/commit; } > $OUT/machine.txt
CASES="512x4096x4096:RC 512x4096x4096:CC 128x4096x4096:RR 512x4096x14336:CR 1024x1024x1024:RC 128x14336x4096:RR"
for c in $CASES; do
  s=${c%:*}; l=${c#*:}
  t0=$(date +%s)
  timeout 150 $B tune --version wgmma_tma_ws --shape $s --layout $l --search exhaustive --reps 40 --top 12 > $OUT/tune-$s-$l.txt 2>&1
  echo "tune $s $l rc $? $(( $(date +%s) - t0 )) s"
done
: > $OUT/ab.jsonl
for round in 1 2 3; do
  for c in $CASES; do
    s=${c%:*}; l=${c#*:}
    for v in tuned heur; do
      E=""; [ $v = heur ] && E="KILN_NO_TUNED=1"
      r=$(env $E timeout 60 $B --no-store bench --shape $s --layout $l --reps 60 --json 2>>$OUT/err.txt)
      echo "{\"shape\":\"$s $l\",\"v\":\"$v\",\"round\":$round,\"r\":$r}" >> $OUT/ab.jsonl
    done
  done
done
python3 .carry/s11/parse_ab.py $OUT/ab.jsonl | tee $OUT/summary.txt
for f in $OUT/tune-*.txt; do echo "== $f"; grep -v '^\s*$' $f | tail -22 | head -16; done
