#!/usr/bin/env bash
# Session 7: confirm L2 promotion 128 B for maps whose rows are not on 128-byte lines (the new
# default) against 256 B (the old one, KILN_TMA_PROMOTION=256), four alternating rounds, at the
# row-alignment class (K 4088, 4072: 16-byte rows; 4080: 32-byte) and K 4096 (unchanged: both
# 256), cuBLAS in the same process.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-s7e; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: 0cb6bda + promotion rule"; } > $OUT/machine.txt
: > $OUT/promo.jsonl
for round in 1 2 3 4; do
  for k in 4088 4072 4080 4096; do
    if [ $((round % 2)) = 1 ]; then ORDER="256 default"; else ORDER="default 256"; fi
    for pr in $ORDER; do
      echo -n "{\"p\": \"$pr\", \"r\": " >> $OUT/promo.jsonl
      KILN_TMA_PROMOTION=$pr $B --no-store --json bench --shape 4096x4096x$k --version wgmma_tma_ws --reps 30 --warmup-ms 200 2>>$OUT/err.txt | tr -d '\n' >> $OUT/promo.jsonl; echo "}" >> $OUT/promo.jsonl
    done
  done
done
python3 - $OUT/promo.jsonl <<'PY' | tee $OUT/promo.txt
import json, sys, collections, statistics as st
t = collections.defaultdict(list)
for l in open(sys.argv[1]):
    o = json.loads(l); r = o['r'][0]; k = r['problem']['k']
    t[(k, o['p'])].append((r['versions'][0][0]['median_ms'] * 1000, r['vendor']['median_ms'] * 1000, r['versions'][0][1]))
for k in (4088, 4072, 4080, 4096):
    a = t[(k, '256')]; b = t[(k, 'default')]
    ka = st.median([x for x,_,_ in a]); kb = st.median([x for x,_,_ in b])
    print(f"K {k}: 256 B kiln {ka:7.1f} us (x cuBLAS {st.median([c for _,_,c in a]):.3f}) | rule kiln {kb:7.1f} us (x cuBLAS {st.median([c for _,_,c in b]):.3f}) | time rule/256 {kb/ka:.3f} | cuBLAS {st.median([y for _,y,_ in a+b]):.1f} us")
PY
