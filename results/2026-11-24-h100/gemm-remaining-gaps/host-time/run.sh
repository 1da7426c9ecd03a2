#!/usr/bin/env bash
# Session 22 run 7 (binary with host_us; kernels as main's 9c9648d): is the small shapes' slow
# mode in the target set (512^3: 6.3 us or 7.3-8.1 us by its place, run 6) the GPU waiting on
# kiln's host work after the flush? The set in four layouts, two passes (seed 7), each row with
# the median host time of each version's launch call; then 512^3 alone, four processes.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/ht; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/ht/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
K=.carry/host/kiln; chmod +x $K
save() { tar czf $FINAL/ht.tgz -C /tmp ht; }
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; nproc; date -u; echo "binary: $(cat .carry/host/COMMIT)"; } > $OUT/machine.txt
for i in 1 2; do for l in RC CC; do timeout 30 $K --no-store bench --shape 512 --layout $l --reps 30 >> $OUT/alone.txt 2>&1; done; done
cat $OUT/alone.txt | grep -E "wgmma|cublas"
timeout 450 $K --json bench --set targets --layouts RC,CR,RR,CC --reps 30 --passes 2 --order-seed 7 > $OUT/targets.json 2>>$OUT/err.txt
echo "targets rc $?"; date -u >> $OUT/machine.txt
save
python3 scripts/targets-table.py $OUT/targets.json > $OUT/targets.txt 2>&1; tail -8 $OUT/targets.txt
python3 - $OUT/targets.json <<'PY' | tee $OUT/host.txt
import json, sys
rows = json.load(open(sys.argv[1]))
print(f"{'problem':22s} pass place  kiln us  host us | cublas us host us | ratio")
for r in sorted(rows, key=lambda r: r['versions'][0][0]['median_ms'])[:60]:
    p = r['problem']; k = r['versions'][0][0]; v = r['vendor']
    print(f"{p['m']}x{p['n']}x{p['k']} {p['layout']:4s} {r['pass']:4d} {r['position']:5d} {k['median_ms']*1e3:8.2f} {k.get('host_us', float('nan')):8.1f} | {v['median_ms']*1e3:9.2f} {v.get('host_us', float('nan')):7.1f} | {r['versions'][0][1]:.3f}")
PY
save
