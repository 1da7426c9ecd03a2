#!/usr/bin/env bash
# Session 7: single CTAs defer their epilogue only when another unit follows (a CTA's last tile
# goes out at once). The target-set layouts hinted a ~1-2 % loss at one-unit-per-CTA shapes
# (512x4096x4096, 2048^3). Verify, then 2a6f836 (always defer) vs this binary, three rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
OLD=.carry/lead/kiln-s7j; NEW=.carry/lead/kiln-s7k; chmod +x $OLD $NEW
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "old 2a6f836, new = working tree (defer only with a next unit)"; } > $OUT/machine.txt
timeout 240 $NEW --no-store verify --suite full --version wgmma_tma_ws > $OUT/verify-full.txt 2>&1; rc=$?; echo "verify full exit $rc $(tail -1 $OUT/verify-full.txt)" | tee $OUT/verify.txt
[ $rc -ne 0 ] && exit 1
KILN_WGMMA_CFG=large timeout 90 $NEW --no-store verify --suite quick --version wgmma_tma_ws > $OUT/v.txt 2>&1; echo "verify quick large exit $? $(tail -1 $OUT/v.txt)" | tee -a $OUT/verify.txt
: > $OUT/ab.jsonl
for round in 1 2 3; do for sl in 512x4096x4096:RC 512x4096x4096:CR 2048x2048x2048:RC 2048x2048x2048:CC 4096x4096x4096:RC 8192x14336x4096:RC; do
  s=${sl%%:*}; l=${sl##*:}
  if [ $((round % 2)) = 1 ]; then ORDER="old new"; else ORDER="new old"; fi
  for b in $ORDER; do
    if [ $b = old ]; then BIN=$OLD; else BIN=$NEW; fi
    echo -n "{\"b\": \"$b\", \"l\": \"$l\", \"r\": " >> $OUT/ab.jsonl
    $BIN --no-store --json bench --shape $s --layout $l --version wgmma_tma_ws --reps 30 --warmup-ms 100 2>>$OUT/err.txt | tr -d '\n' >> $OUT/ab.jsonl; echo "}" >> $OUT/ab.jsonl
  done
done; done
python3 - $OUT/ab.jsonl <<'PY' | tee $OUT/ab.txt
import json, sys, collections, statistics as st
t = collections.defaultdict(list); keys = []
for l in open(sys.argv[1]):
    o = json.loads(l); r = o['r'][0]; p = r['problem']; k = f"{p['m']}x{p['n']}x{p['k']} {o['l']}"
    if k not in keys: keys.append(k)
    t[(k, o['b'])].append((r['versions'][0][0]['median_ms'] * 1000, r['versions'][0][1]))
for k in keys:
    a = t[(k, 'old')]; b = t[(k, 'new')]
    print(f"{k:22s} always {st.median([x for x,_ in a]):8.1f} us ({st.median([r for _,r in a]):.3f}) | next-unit only {st.median([x for x,_ in b]):8.1f} us ({st.median([r for _,r in b]):.3f}) | time {st.median([x for x,_ in b])/st.median([x for x,_ in a]):.3f}  rounds {[round(r,3) for _,r in a]} {[round(r,3) for _,r in b]}")
PY
