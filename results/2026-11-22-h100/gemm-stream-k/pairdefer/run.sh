#!/usr/bin/env bash
# Session 8 (c): CTA pairs deferring all four chunks of their TMA-store epilogue (room made by the
# register-epilogue split, gemm #24) against pairs deferring one (HEAD 710f58b) and against the
# default (single CTAs, all deferred). Verify pairs first (quick + the layouts at 4096^3 and 4088).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
HEAD=.carry/lead/kiln-s8c-head; NEW=.carry/lead/kiln-s8c-pairdefer; chmod +x $HEAD $NEW
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "head 710f58b; pairdefer = head + DCH 4 for pairs"; } > $OUT/machine.txt
v() { local name=$1; shift; echo "== $name" >> $OUT/verify.txt; timeout 200 "$@" > /tmp/v.txt 2>&1; local rc=$?; cat /tmp/v.txt >> $OUT/verify.txt; echo "verify $name exit $rc: $(tail -1 /tmp/v.txt)"; [ $rc -ne 0 ] && exit 1; }
KILN_WGMMA_CFG=pair v pair-quick $NEW --no-store verify --suite quick --version wgmma_tma_ws
for l in RC CR RR CC; do KILN_WGMMA_CFG=pair v pair-4096-$l $NEW --no-store verify --shape 4096 --layout $l --version wgmma_tma_ws; done
v default-4088 $NEW --no-store verify --shape 4096x4096x4088 --version wgmma_tma_ws
SHAPES="4096 8192 8192x14336x4096 2048x14336x4096 4096x4096x1024 4000 4096x4096x4088 8192x4096x4096 2048x4096x14336"
mkdir -p /tmp/tj; : > /tmp/tj/all.jsonl
for run in 1 2; do
  for b in $([ $run = 1 ] && echo "single pair1 pair4" || echo "pair4 single pair1"); do
    case $b in single) BIN=$NEW; E=;; pair1) BIN=$HEAD; E=KILN_WGMMA_CFG=pair;; pair4) BIN=$NEW; E=KILN_WGMMA_CFG=pair;; esac
    for s in $SHAPES; do
      # 4088 runs pairs by default; "single" there is forced single CTAs
      EE=$E; [ $b = single ] && [ $s = 4096x4096x4088 ] && EE=KILN_WGMMA_PAIRS=0
      echo "{\"b\": \"$b\", \"run\": $run, \"r\": $(env $EE $BIN --no-store --json bench --shape $s --reps 30 --version wgmma_tma_ws 2>>$OUT/err.txt | tr -d '\n')}" >> /tmp/tj/all.jsonl
    done
    echo "bench $b $run done"
  done
done
cp /tmp/tj/all.jsonl $OUT/bench.jsonl
python3 - $OUT/bench.jsonl <<'PY' | tee $OUT/summary.txt
import json, sys, collections, statistics as st
t = collections.defaultdict(lambda: collections.defaultdict(list)); order = []
for line in open(sys.argv[1]):
    o = json.loads(line)
    for r in o['r']:
        p = r['problem']; k = f"{p['m']}x{p['n']}x{p['k']}"
        if k not in order: order.append(k)
        t[k][o['b']].append(r['versions'][0][1])
print(f"{'shape':18s} {'single':>7s} {'pair1':>7s} {'pair4':>7s}   runs")
for k in order:
    print(f"{k:18s} " + " ".join(f"{st.median(t[k][b]):7.3f}" for b in ('single','pair1','pair4')) + "   " + str({b: [round(x,3) for x in t[k][b]] for b in ('single','pair1','pair4')}))
PY
