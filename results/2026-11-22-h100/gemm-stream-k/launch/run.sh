#!/usr/bin/env bash
# Session 8 (i): where kiln's ~1 us outside the kernel goes at 512^3 (gemm #26). Old = main
# (shared-memory attribute set on every launch); new = set once per function. Also the register
# epilogue (no async TMA stores at the kernel's end) and no L2 flush. Five alternating rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
OLD=.carry/lead/kiln-s8c-head; NEW=.carry/lead/kiln-s8i; chmod +x $OLD $NEW
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "old 710f58b; new = + smem attribute set once"; } > $OUT/machine.txt
timeout 100 $NEW --no-store verify --suite quick --version wgmma_tma_ws > $OUT/verify.txt 2>&1; echo "verify rc $?: $(tail -1 $OUT/verify.txt)"
: > /tmp/b.jsonl
for run in 1 2 3 4 5; do
  for b in old new new-epi0 new-noflush old-noflush; do
    case $b in old) BIN=$OLD; E=; F=;; new) BIN=$NEW; E=; F=;; new-epi0) BIN=$NEW; E=KILN_WGMMA_EPI=0; F=;; new-noflush) BIN=$NEW; E=; F=--no-flush;; old-noflush) BIN=$OLD; E=; F=--no-flush;; esac
    for s in 512 1024 128x4096x4096 4096; do
      echo "{\"b\": \"$b\", \"r\": $(env $E $BIN --no-store --json bench --shape $s --reps 50 $F --version wgmma_tma_ws 2>>$OUT/err.txt | tr -d '\n')}" >> /tmp/b.jsonl
    done
  done
done
cp /tmp/b.jsonl $OUT/bench.jsonl
python3 - /tmp/b.jsonl <<'PY' | tee $OUT/summary.txt
import json, sys, collections, statistics as st
t = collections.defaultdict(lambda: collections.defaultdict(list)); order = []; bs = []
for line in open(sys.argv[1]):
    o = json.loads(line)
    if o['b'] not in bs: bs.append(o['b'])
    for r in o['r']:
        p = r['problem']; k = f"{p['m']}x{p['n']}x{p['k']}"
        if k not in order: order.append(k)
        t[k][o['b']].append((r['versions'][0][1], r['versions'][0][0]['median_ms']*1e3, r['vendor']['median_ms']*1e3))
for k in order:
    print(k)
    for b in bs:
        v = t[k][b]
        print(f"  {b:12s} ratio {st.median(x[0] for x in v):.3f}  kiln {st.median(x[1] for x in v):7.2f} us  cuBLAS {st.median(x[2] for x in v):7.2f} us   {[round(x[0],3) for x in v]}")
PY
