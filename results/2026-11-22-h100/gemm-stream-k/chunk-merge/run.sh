#!/usr/bin/env bash
# Session 8 (j): the TMA-store epilogue's inline chunk loop (non-deferred variants: TINY64,
# KILN_WGMMA_DEFER=0) replaced by store_chunk, as the deferred path stores. SASS changed in the
# 16 TINY64 variants and 12 CR single-CTA variants (same instruction count). Verify (full suite;
# quick with TINY64 forced; quick with DEFER=0), then old (main) vs new, three alternating rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
OLD=.carry/lead/kiln-s8c-head; NEW=.carry/lead/kiln-s8j; chmod +x $OLD $NEW
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "old 710f58b kernels; new = one chunk-store path"; } > $OUT/machine.txt
v() { local name=$1; shift; echo "== $name" >> $OUT/verify.txt; timeout 240 "$@" > /tmp/v.txt 2>&1; local rc=$?; cat /tmp/v.txt >> $OUT/verify.txt; echo "verify $name exit $rc: $(tail -1 /tmp/v.txt)"; [ $rc -ne 0 ] && exit 1; }
v full $NEW --no-store verify --suite full --version wgmma_tma_ws
KILN_WGMMA_CFG=tiny64 v tiny64 $NEW --no-store verify --suite quick --version wgmma_tma_ws
KILN_WGMMA_DEFER=0 v defer0 $NEW --no-store verify --suite quick --version wgmma_tma_ws
: > /tmp/b.jsonl
for run in 1 2 3; do
  for b in $([ $run = 2 ] && echo "new old" || echo "old new"); do
    BIN=$OLD; [ $b = new ] && BIN=$NEW
    for sl in 512:RC 128x4096x4096:RC 128x4096x14336:RC 64x4096x4096:RC 4096:CR 2048:CR 1024:CR 4096:RC; do
      s=${sl%%:*}; l=${sl##*:}
      echo "{\"b\": \"$b\", \"l\": \"$l\", \"r\": $($BIN --no-store --json bench --shape $s --layout $l --reps 40 --version wgmma_tma_ws 2>>$OUT/err.txt | tr -d '\n')}" >> /tmp/b.jsonl
    done
  done
done
cp /tmp/b.jsonl $OUT/bench.jsonl
python3 - /tmp/b.jsonl <<'PY' | tee $OUT/summary.txt
import json, sys, collections, statistics as st
t = collections.defaultdict(lambda: collections.defaultdict(list)); order = []
for line in open(sys.argv[1]):
    o = json.loads(line)
    for r in o['r']:
        p = r['problem']; k = f"{p['m']}x{p['n']}x{p['k']} {o['l']}"
        if k not in order: order.append(k)
        t[k][o['b']].append((r['versions'][0][1], r['versions'][0][0]['median_ms']*1e3))
print(f"{'shape':22s} {'old':>7s} {'new':>7s}  time new/old   runs")
for k in order:
    o, n = t[k]['old'], t[k]['new']
    to, tn = st.median(x[1] for x in o), st.median(x[1] for x in n)
    print(f"{k:22s} {st.median(x[0] for x in o):7.3f} {st.median(x[0] for x in n):7.3f}  {tn/to:.3f}   {[round(x[0],3) for x in o]} {[round(x[0],3) for x in n]}")
PY
