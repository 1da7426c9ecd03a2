#!/usr/bin/env bash
# Session 18 run 2 (binary n = main d1f96d5 + `kiln sanitize --configs`): compute-sanitizer over
# every tile config of wgmma_tma_ws, forced (whole, f32 C, split 3, last-wave split 3, stream-K),
# in every layout, each at a problem `kiln plan` shows it runs. Two halves of the tools, so that
# one that overruns the call leaves the other's table.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
K=.carry/s18/kiln-n; chmod +x $K
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: n = d1f96d5 + sanitize --configs"; } > $OUT/machine.txt
$K --no-store sanitize --configs --list > $OUT/list.txt 2>&1; tail -1 $OUT/list.txt
for half in "memcheck racecheck" "synccheck initcheck"; do
  t0=$SECONDS; tag=${half// /-}
  args=""; for t in $half; do args="$args --tool $t"; done
  timeout 285 $K --no-store sanitize --configs $args --jobs 8 --timeout 120 > $OUT/$tag.txt 2> $OUT/$tag-stderr.txt
  echo "== $half: rc $? in $((SECONDS - t0)) s"; cat $OUT/$tag.txt | tail -60
done
