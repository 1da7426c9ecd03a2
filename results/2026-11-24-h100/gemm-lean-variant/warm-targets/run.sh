#!/usr/bin/env bash
# Session 23 run 4 (binary 97f9b4a, .carry/lean): (a) the whole registry (with the lean
# wgmma_tma_ws variants, #91) compiled cold by `kiln check` 16 at a time, then its warm start
# (every variant from the JIT cache; issue 4's target: under 50 ms in all); (b) issue 3's
# target set, four layouts, two passes (the set's order, then a shuffle, seed 23).
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/wt; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit-all
D=.carry/lean; S=$D/kiln; chmod +x $S
save() { tar czf $FINAL/wt.tgz -C /tmp wt; }
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,driver_version --format=csv; date -u; echo "binary: $(cat $D/COMMIT)"; } > $OUT/machine.txt
rm -rf /tmp/kiln-jit-all
t0=$SECONDS; timeout 240 $S --no-store check > $OUT/check-cold.txt 2>&1; echo "cold rc $? ($((SECONDS - t0)) s): $(grep -E 'variants for' $OUT/check-cold.txt | tail -1)" | tee $OUT/summary.txt
for i in 1 2 3; do timeout 60 $S --no-store check > $OUT/check-warm$i.txt 2>&1; echo "warm $i: $(grep -E 'variants for|warm start' $OUT/check-warm$i.txt | tr '\n' ' ')" | tee -a $OUT/summary.txt; done
save
export KILN_CACHE_DIR=/tmp/kiln-jit
timeout 420 $S --no-store --json bench --set targets --layouts RC,CR,RR,CC --reps 30 --passes 2 --order-seed 23 > $OUT/targets.json 2> $OUT/targets.err
echo "targets rc $?" | tee -a $OUT/summary.txt
python3 scripts/targets-table.py $OUT/targets.json > $OUT/targets.txt 2>&1; tail -12 $OUT/targets.txt | tee -a $OUT/summary.txt
save
