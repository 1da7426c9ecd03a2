#!/usr/bin/env bash
# Session 19 run 3: issue 3's ladder table, refreshed on the H100 at the session's code:
# `kiln suite` (the main job: compile check of every variant, every GEMM version verified on the
# full shape suite, every version timed at the ladder shapes against cuBLAS in the same process).
# nvidia-smi samples clocks and throttle reasons every 200 ms alongside (two runs this session
# met one process where kiln and cuBLAS both ran 3-4x slow).
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/ladder; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
K=.carry/ladder/kiln; chmod +x $K
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: $(cat .carry/ladder/COMMIT)"; nproc; } > $OUT/machine.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 200 > $OUT/clocks.csv 2>&1 &
SMI=$!
t0=$SECONDS
timeout 540 $K --no-store suite --verify full --save $OUT/suite.json > $OUT/suite.txt 2>&1
echo "suite exit: $? after $((SECONDS - t0)) s" | tee -a $OUT/suite.txt
kill $SMI
grep -A12 "== summary" $OUT/suite.txt
grep -E "variants for sm_90a|warm start" $OUT/suite.txt | head -3
tar czf $FINAL/ladder.tgz -C /tmp ladder
