#!/usr/bin/env bash
# Session 7: the deferred TMA-store epilogue, second form: single CTAs defer all four chunks,
# CTA pairs the last one (more spills their 224-register consumers). (1) full verify (default),
# quick verify with pairs, single and split-K forced; (2) at the large shapes, three rotated
# rounds: A = pairs, old epilogue (KILN_WGMMA_DEFER=0); B = pairs, deferred last chunk (the new
# default); C = single CTAs (KILN_WGMMA_PAIRS=0), all chunks deferred.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-s7h; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: 7c0d13c + deferred epilogue (pairs: last chunk)"; } > $OUT/machine.txt
timeout 240 $B --no-store verify --suite full --version wgmma_tma_ws > $OUT/verify-full.txt 2>&1; rc=$?; echo "verify full exit $rc" | tee $OUT/verify.txt; tail -1 $OUT/verify-full.txt >> $OUT/verify.txt
[ $rc -ne 0 ] && { echo "stopping: full verify failed"; exit 1; }
for e in "KILN_WGMMA_CFG=pair" "KILN_WGMMA_CFG=large" "KILN_WGMMA_CFG=large KILN_WGMMA_SPLITS=3"; do
  env $e timeout 90 $B --no-store verify --suite quick --version wgmma_tma_ws > $OUT/v.txt 2>&1; echo "verify quick $e exit $?" | tee -a $OUT/verify.txt; tail -1 $OUT/v.txt >> $OUT/verify.txt
done
SHAPES="4096x4096x4096 8192x8192x8192 8192x14336x4096 2048x14336x4096 4000x4000x4000 4096x4096x1024 4096x4096x4088"
: > $OUT/ab.jsonl
V="A B C"
for round in 1 2 3; do for s in $SHAPES; do
  for v in $V; do
    case $v in A) E="KILN_WGMMA_DEFER=0";; B) E="KILN_WGMMA_DEFER=1";; C) E="KILN_WGMMA_PAIRS=0 KILN_WGMMA_DEFER=1";; esac
    echo -n "{\"v\": \"$v\", \"r\": " >> $OUT/ab.jsonl
    env $E $B --no-store --json bench --shape $s --version wgmma_tma_ws --reps 30 --warmup-ms 100 2>>$OUT/err.txt | tr -d '\n' >> $OUT/ab.jsonl; echo "}" >> $OUT/ab.jsonl
  done
done; set -- $V; V="$2 $3 $1"; done
python3 - $OUT/ab.jsonl <<'PY' | tee $OUT/ab.txt
import json, sys, collections, statistics as st
t = collections.defaultdict(list); shapes = []
for l in open(sys.argv[1]):
    o = json.loads(l); r = o['r'][0]; p = r['problem']; key = f"{p['m']}x{p['n']}x{p['k']}"
    if key not in shapes: shapes.append(key)
    t[(key, o['v'])].append((r['versions'][0][0]['median_ms'] * 1000, r['versions'][0][1]))
print("A = pairs, old epilogue; B = pairs, last chunk deferred; C = single CTAs, all deferred. us (x cuBLAS, median of rounds)")
for s in shapes:
    row = []
    for v in "ABC":
        x = t[(s, v)]
        row.append(f"{v} {st.median([a for a, _ in x]):8.1f} ({st.median([r for _, r in x]):.3f} {[round(r, 3) for _, r in x]})")
    print(f"{s:18s} " + "  ".join(row))
PY
