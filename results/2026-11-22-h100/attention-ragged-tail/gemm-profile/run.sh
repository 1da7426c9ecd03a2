#!/usr/bin/env bash
# Where the ~0.8 us per tile goes (gemm ledger #13): ncu warp-state sampling per SASS instruction
# of wgmma_tma_ws at 4096^3 bf16 RC (one launch, clocks left alone); the source page's stall
# samples summed over the tile-boundary code (after the last HGMMA of a K loop) vs the loop.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=$OUT/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-final; chmod +x $B
NCU=$(command -v ncu)
$B --no-store bench --shape 4096 --version wgmma_tma_ws --reps 3 --warmup 2 > /dev/null 2>&1
timeout 200 $NCU --clock-control none --section WarpStateStats --section SourceCounters -k regex:gemm_wgmma_tma_ws -s 2 -c 1 -o $OUT/ours $B --no-store bench --shape 4096 --version wgmma_tma_ws --reps 3 --warmup 2 > $OUT/ncu.log 2>&1; echo "ncu rc $?"
$NCU -i $OUT/ours.ncu-rep --page source --csv --print-source sass > $OUT/source.csv 2>&1
$NCU -i $OUT/ours.ncu-rep --page details --csv > $OUT/details.csv 2>&1
rm -f $OUT/ours.ncu-rep $OUT/kiln.db
head -3 $OUT/source.csv | cut -c1-600
wc -l $OUT/source.csv
