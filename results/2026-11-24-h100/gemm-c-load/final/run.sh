#!/usr/bin/env bash
# Session 21 run 8, the final binary (3bcd4a3; kernels identical by cubin hash to the verified
# c662878): issue 3's target set in four layouts (beta = 0), then issue 4's compile figures on
# the GPU host (`kiln check` of the whole registry from an empty JIT cache, 16 compiles at a
# time, then warm). Outputs tarred after each step.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/fin; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
K=.carry/final/kiln; chmod +x $K
save() { tar czf $FINAL/final.tgz -C /tmp fin; }
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; nproc; date -u; echo "binary: $(cat .carry/final/COMMIT)"; } > $OUT/machine.txt
timeout 330 $K --no-store --json bench --set targets --layouts RC,CR,RR,CC --reps 30 > $OUT/targets.json 2>>$OUT/err.txt
echo "targets rc $?"
save
sed -n '/^python3 - \$OUT\/targets.json/,/^PY$/p' results/2026-11-23-h100/session15/final/run.sh > /tmp/targets.sh
OUT=$OUT bash /tmp/targets.sh > $OUT/targets.txt; tail -5 $OUT/targets.txt
save
export KILN_CACHE_DIR=/tmp/kiln-jit-cold; rm -rf $KILN_CACHE_DIR
timeout 200 $K --no-store check > $OUT/cold.txt 2>&1; echo "cold rc $?"; tail -1 $OUT/cold.txt
save
timeout 60 $K --no-store check > $OUT/warm.txt 2>&1; echo "warm rc $?"; tail -1 $OUT/warm.txt
save
