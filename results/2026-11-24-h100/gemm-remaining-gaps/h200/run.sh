#!/usr/bin/env bash
# Session 22 run 9 (binary bf7512f; kernels as main's 9c9648d), on an H200 (the issue allows
# "H100 SXM or H200"): does the vendor leave more room there? 4096^3 and 8192^3 RC, four
# processes each (paired ratio), then issue 3's target set in four layouts, one pass.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/h2; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/h2/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
K=.carry/host/kiln; chmod +x $K
save() { tar czf $FINAL/h2.tgz -C /tmp h2; }
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; nproc; date -u; echo "binary: $(cat .carry/host/COMMIT)"; } > $OUT/machine.txt
: > $OUT/ab.jsonl
for s in 4096x4096x4096 8192x8192x8192; do for i in 1 2 3 4; do
  echo "{\"cfg\":\"main\",\"shape\":\"$s RC\"}" >> $OUT/ab.jsonl
  timeout 60 $K --no-store --json bench --shape $s --reps 30 >> $OUT/ab.jsonl 2>> $OUT/err.txt
done; done
python3 scripts/ab-table.py $OUT/ab.jsonl | tee $OUT/ab.txt
save
timeout 330 $K --json bench --set targets --layouts RC,CR,RR,CC --reps 30 > $OUT/targets.json 2>>$OUT/err.txt
echo "targets rc $?"
python3 scripts/targets-table.py $OUT/targets.json > $OUT/targets.txt 2>&1; cat $OUT/targets.txt
rm -f $OUT/kiln.db; save
