#!/usr/bin/env bash
# Session 7: TMA L2 promotion (KILN_TMA_PROMOTION none / 64 / 128 / 256, the default) at
# 4096x4096x4088 (16-byte aligned rows: 7 of 8 box rows straddle two 128-byte lines; ncu: L2
# 78.6 % busy vs 55.7 % at K 4096) and 4096^3, three rounds, rotated order, cuBLAS in-process.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-s7d; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: 0cb6bda + KILN_TMA_PROMOTION"; } > $OUT/machine.txt
: > $OUT/promo.jsonl
P="256 none 64 128"
for round in 1 2 3; do
  for k in 4088 4096; do
    for pr in $P; do
      echo -n "{\"p\": \"$pr\", \"r\": " >> $OUT/promo.jsonl
      KILN_TMA_PROMOTION=$pr $B --no-store --json bench --shape 4096x4096x$k --version wgmma_tma_ws --reps 30 --warmup-ms 200 2>>$OUT/err.txt | tr -d '\n' >> $OUT/promo.jsonl; echo "}" >> $OUT/promo.jsonl
    done
  done
  set -- $P; P="$2 $3 $4 $1"
done
python3 - $OUT/promo.jsonl <<'PY' | tee $OUT/promo.txt
import json, sys, collections, statistics as st
t = collections.defaultdict(list)
for l in open(sys.argv[1]):
    o = json.loads(l); r = o['r'][0]; k = r['problem']['k']
    t[(k, o['p'])].append((r['versions'][0][0]['median_ms'] * 1000, r['vendor']['median_ms'] * 1000, r['versions'][0][1]))
for (k, p), v in sorted(t.items()):
    print(f"K {k} promotion {p:4s}: kiln {st.median([a for a,_,_ in v]):7.1f} us  cuBLAS {st.median([b for _,b,_ in v]):7.1f} us  ratio {st.median([c for _,_,c in v]):.3f}  rounds {[round(c,3) for _,_,c in v]}")
PY
