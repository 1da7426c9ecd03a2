#!/usr/bin/env bash
# Session 18 run 5, the final binary (o = the session's code): issue 3's target set in four
# layouts, then issue 4's compile figures on the GPU host (`kiln check` of the whole registry from
# an empty JIT cache, 16 compiles at a time, then warm). One tarball back.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/fin; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
K=.carry/s18/kiln-o; chmod +x $K
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; nproc; date -u; echo "binary: o (session 18 final)"; } > $OUT/machine.txt
timeout 330 $K --no-store --json bench --set targets --layouts RC,CR,RR,CC --reps 30 > $OUT/targets.json 2>>$OUT/err.txt
echo "targets rc $?"
sed -n '/^python3 - \$OUT\/targets.json/,/^PY$/p' results/2026-11-23-h100/session15/final/run.sh > /tmp/targets.sh
OUT=$OUT bash /tmp/targets.sh | tee $OUT/targets.txt
export KILN_CACHE_DIR=/tmp/kiln-jit-cold; rm -rf $KILN_CACHE_DIR
timeout 170 $K --no-store check > $OUT/cold.txt 2>&1; echo "cold rc $?"; tail -1 $OUT/cold.txt
timeout 60 $K --no-store check > $OUT/warm.txt 2>&1; echo "warm rc $?"; tail -1 $OUT/warm.txt
tar czf $FINAL/final.tgz -C /tmp fin
