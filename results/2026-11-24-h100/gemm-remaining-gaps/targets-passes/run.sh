#!/usr/bin/env bash
# Session 22 run 6 (binary with `bench --passes`; kernels as main's 9c9648d): issue 3's target
# set in four layouts, three passes: the set's order, then two seeded shuffles. Each problem's
# ratio to cuBLAS is its median over the three places it ran in (#89: single-pass lows follow
# the place in the run). The store is kept so a timeout still leaves the rows.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/tp; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/tp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
K=.carry/passes/kiln; chmod +x $K
save() { tar czf $FINAL/tp.tgz -C /tmp tp; }
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; nproc; date -u; echo "binary: $(cat .carry/passes/COMMIT)"; } > $OUT/machine.txt
timeout 30 $K bench --shape 512 --passes 2 --reps 5 > $OUT/smoke.txt 2>&1; echo "smoke rc $?"; tail -4 $OUT/smoke.txt
timeout 560 $K --json bench --set targets --layouts RC,CR,RR,CC --reps 30 --passes 3 --order-seed 22 > $OUT/targets.json 2>>$OUT/err.txt
echo "targets rc $?"; date -u >> $OUT/machine.txt
save
python3 scripts/targets-table.py $OUT/targets.json > $OUT/targets.txt 2>&1; cat $OUT/targets.txt
tail -3 $OUT/err.txt
save
