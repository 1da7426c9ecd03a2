#!/usr/bin/env bash
# Session 7: is the K 4088 recovery (0.836x -> 0.99x between two fast machines) the L2 promotion
# rule? Same binary, KILN_TMA_PROMOTION=256 (the old default) vs the rule, K 4088 and 4096, three
# alternating rounds; cuBLAS 4096^3 time tells the machine class (fast ~172-177 us).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-s7i; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: session 7 final working tree"; } > $OUT/machine.txt
: > $OUT/promo.jsonl
for round in 1 2 3; do for k in 4088 4096; do
  if [ $((round % 2)) = 1 ]; then ORDER="256 rule"; else ORDER="rule 256"; fi
  for pr in $ORDER; do
    echo -n "{\"p\": \"$pr\", \"r\": " >> $OUT/promo.jsonl
    KILN_TMA_PROMOTION=$pr $B --no-store --json bench --shape 4096x4096x$k --version wgmma_tma_ws --reps 30 --warmup-ms 200 2>>$OUT/err.txt | tr -d '\n' >> $OUT/promo.jsonl; echo "}" >> $OUT/promo.jsonl
  done
done; done
python3 - $OUT/promo.jsonl <<'PY' | tee $OUT/promo.txt
import json, sys, collections, statistics as st
t = collections.defaultdict(list)
for l in open(sys.argv[1]):
    o = json.loads(l); r = o['r'][0]; k = r['problem']['k']
    t[(k, o['p'])].append((r['versions'][0][0]['median_ms'] * 1000, r['vendor']['median_ms'] * 1000, r['versions'][0][1]))
for (k, p), v in sorted(t.items()):
    print(f"K {k} promotion {p:4s}: kiln {st.median([a for a,_,_ in v]):7.1f} us  cuBLAS {st.median([b for _,b,_ in v]):7.1f} us  ratio {st.median([c for _,_,c in v]):.3f}  rounds {[round(c,3) for _,_,c in v]}")
PY
