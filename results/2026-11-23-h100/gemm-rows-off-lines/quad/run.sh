#!/usr/bin/env bash
# Session 15 run 3: 2 x 2 clusters (binary c: the pairs paired along N, A multicast as well as B;
# `KILN_WGMMA_CFG=quad` 128x256, `medium-quad` 128x192; not yet in the heuristic). Verified
# forced in every layout (edges: a last tile-column or tile-row of the cluster wholly outside C,
# one cluster walking everything, f32 C with beta, f16); then timed forced against the default
# (pairs) where rows straddle lines, and on lines for comparison.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
C=.carry/s15/kiln-c; chmod +x $C
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: c = 5045141 + 2x2 clusters (uncommitted)"; } > $OUT/machine.txt
: > $OUT/verify.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; timeout 300 env "$@" >> $OUT/verify.txt 2>&1; local rc=$?; echo "verify $tag rc $rc: $(grep -E '^\| wgmma_tma_ws ' $OUT/verify.txt | tail -1)"; }
for cfg in quad medium-quad; do
  for l in RC CR RR CC; do
    for s in 3000x3000x3000 1000x1100x700 129x193x65 300x2000x1000 4096x4096x4088; do
      v "$cfg $l $s" KILN_WGMMA_CFG=$cfg $C --no-store verify --version wgmma_tma_ws --shape $s --layout $l
    done
    v "$cfg $l f32 beta" KILN_WGMMA_CFG=$cfg $C --no-store verify --version wgmma_tma_ws --shape 1000x1500x700 --layout $l --out f32 --beta 0.5
    v "$cfg $l f16 beta" KILN_WGMMA_CFG=$cfg $C --no-store verify --version wgmma_tma_ws --shape 700x900x1000 --layout $l --dtype f16 --beta 0.5
    v "$cfg $l grid 1" KILN_WGMMA_CFG=$cfg KILN_WGMMA_GRID=1 $C --no-store verify --version wgmma_tma_ws --shape 1000x1100x700 --layout $l
  done
done
echo "verify: $(grep -cE '^\| wgmma_tma_ws +\| 1 +\| 0 ' $OUT/verify.txt) of $(grep -c '^==' $OUT/verify.txt) pass"
: > $OUT/ab.jsonl
for sl in 3000x3000x3000:RC 3000x3000x3000:CC 2992x2992x2992:RC 4000x4000x4000:RC 4000x4000x4000:CR 4096x4096x4088:RC 3000x4000x3000:RC 3072x3072x3072:RC 4096x4096x4096:RC; do
  s=${sl%:*}; l=${sl#*:}
  for cfg in default quad medium-quad quad medium-quad default; do
    [ $cfg = default ] && E="" || E="KILN_WGMMA_CFG=$cfg"
    echo "{\"bin\":\"$cfg\",\"shape\":\"$s $l\"}" >> $OUT/ab.jsonl
    env $E $C --no-store --json bench --shape $s --layout $l --reps 30 >> $OUT/ab.jsonl 2>> $OUT/err.txt
  done
done
python3 - $OUT/ab.jsonl <<'PY' | tee $OUT/ab.txt
import json, sys, collections, statistics as st
txt = open(sys.argv[1]).read(); dec = json.JSONDecoder(); i = 0; tag = None
res = collections.defaultdict(list)
while i < len(txt):
    while i < len(txt) and txt[i].isspace(): i += 1
    if i >= len(txt): break
    o, i = dec.raw_decode(txt, i)
    if isinstance(o, dict) and 'bin' in o: tag = (o['shape'], o['bin']); continue
    r = o[0] if isinstance(o, list) else o
    res[tag + ('kiln',)].append(r['versions'][0][0]['median_ms'] * 1e3)
    res[tag + ('cublas',)].append(r['vendor']['median_ms'] * 1e3)
print(f"{'shape':20s} {'config':12s} {'kiln us':>8s} {'cublas us':>9s} {'ratio':>6s}")
for (s, b) in dict.fromkeys(k[:2] for k in res):
    k, c = st.median(res[(s, b, 'kiln')]), st.median(res[(s, b, 'cublas')])
    print(f"{s:20s} {b:12s} {k:8.2f} {c:9.2f} {c/k:6.3f}")
PY
