#!/usr/bin/env bash
# Where fa3_wgmma's per-item cost goes: ncu warp-state sampling per SASS instruction (one launch,
# clocks left alone) of d128 B4 H16 4096 query rows at 1024 keys (8 key tiles per item: item
# boundaries weigh 4x more than at 4096 keys) and at 4096 keys.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-qbuf; chmod +x $B
NCU=$(command -v ncu)
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; cat .carry/lead/commit-qbuf; } > $OUT/machine.txt
for kv in 1024 4096; do
  A="--no-store attn bench --batch 4 --heads 16 --seqlen-q 4096 --seqlen-kv $kv --dim 128 --version fa3_wgmma --reps 3 --warmup 2"
  $B $A > /dev/null 2>&1
  timeout 240 $NCU --clock-control none --section WarpStateStats --section SourceCounters --section SpeedOfLight -k regex:attn_fa3 -s 2 -c 1 -o $OUT/r$kv $B $A > $OUT/ncu-$kv.log 2>&1; echo "ncu $kv rc $?"
  $NCU -i $OUT/r$kv.ncu-rep --page source --csv --print-source sass > $OUT/source-$kv.csv 2>&1
  $NCU -i $OUT/r$kv.ncu-rep --page details --csv > $OUT/details-$kv.csv 2>&1
  rm -f $OUT/r$kv.ncu-rep
done
wc -l $OUT/source-*.csv
head -2 $OUT/source-1024.csv | cut -c1-400
