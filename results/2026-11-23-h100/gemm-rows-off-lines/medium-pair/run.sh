#!/usr/bin/env bash
# Session 15 run 1: 128x192 tiles in CTA pairs multicasting B (MEDIUM_PAIR), the heuristic's
# pick where rows straddle 128-byte lines and the 192-wide tile quantises best (3000^3).
# Verified first (binary b): the full suite on the default dispatch; medium-pair forced in every
# layout with 16-bit and f32 C, beta, f16, split-K over all tiles and the last wave, a small
# grid; then timed against binary a (main), rotated (a b b a), and forced configs on b.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
A=.carry/s15/kiln-a; B=.carry/s15/kiln-b; chmod +x $A $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binaries: a = main 23013c2, b = a + MEDIUM_PAIR"; } > $OUT/machine.txt
: > $OUT/verify.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; timeout 300 env "$@" >> $OUT/verify.txt 2>&1; local rc=$?; echo "verify $tag rc $rc: $(grep -E '^\| wgmma_tma_ws ' $OUT/verify.txt | tail -1)"; }
v full KILN_X=0 $B --no-store verify --version wgmma_tma_ws --suite full
for l in RC CR RR CC; do
  for s in 3000x3000x3000 1000x1500x700 129x193x65 300x2000x1000 4096x4096x4088; do
    v "medium-pair $l $s" KILN_WGMMA_CFG=medium-pair $B --no-store verify --version wgmma_tma_ws --shape $s --layout $l
  done
  v "medium-pair $l f32 beta" KILN_WGMMA_CFG=medium-pair $B --no-store verify --version wgmma_tma_ws --shape 1000x1500x700 --layout $l --out f32 --beta 0.5
  v "medium-pair $l bf16 beta" KILN_WGMMA_CFG=medium-pair $B --no-store verify --version wgmma_tma_ws --shape 700x900x1000 --layout $l --beta 0.5
  v "medium-pair $l f16" KILN_WGMMA_CFG=medium-pair $B --no-store verify --version wgmma_tma_ws --shape 1000x1500x700 --layout $l --dtype f16
  v "medium-pair $l splits 3" KILN_WGMMA_CFG=medium-pair KILN_WGMMA_SPLITS=3 $B --no-store verify --version wgmma_tma_ws --shape 1000x1500x2000 --layout $l
  v "medium-pair $l tail 3 grid 4" KILN_WGMMA_CFG=medium-pair KILN_WGMMA_SPLITS=3 KILN_WGMMA_TAIL=1 KILN_WGMMA_GRID=4 $B --no-store verify --version wgmma_tma_ws --shape 1000x1500x2000 --layout $l
  v "medium-pair $l grid 2" KILN_WGMMA_CFG=medium-pair KILN_WGMMA_GRID=2 $B --no-store verify --version wgmma_tma_ws --shape 1000x1500x700 --layout $l
done
echo "verify lines with FAIL: $(grep -ci 'fail' $OUT/verify.txt)"
: > $OUT/ab.jsonl
for sl in 3000x3000x3000:RC 3000x3000x3000:CR 3000x3000x3000:RR 3000x3000x3000:CC 2992x2992x2992:RC 3000x4000x3000:RC 3072x3072x3072:RC 4096x4096x4088:RC; do
  s=${sl%:*}; l=${sl#*:}
  for bin in a b b a; do
    [ $bin = a ] && X=$A || X=$B
    echo "{\"bin\":\"$bin\",\"shape\":\"$s $l\"}" >> $OUT/ab.jsonl
    $X --no-store --json bench --shape $s --layout $l --reps 30 >> $OUT/ab.jsonl 2>> $OUT/err.txt
  done
done
for cfg in medium medium-pair pair large; do
  for r in 1 2; do
    echo "{\"bin\":\"$cfg\",\"shape\":\"3000x3000x3000 RC\"}" >> $OUT/ab.jsonl
    KILN_WGMMA_CFG=$cfg $B --no-store --json bench --shape 3000 --reps 30 >> $OUT/ab.jsonl 2>> $OUT/err.txt
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
print(f"{'shape':20s} {'bin':12s} {'kiln us':>8s} {'cublas us':>9s} {'ratio':>6s}")
for (s, b) in dict.fromkeys(k[:2] for k in res):
    k, c = st.median(res[(s, b, 'kiln')]), st.median(res[(s, b, 'cublas')])
    print(f"{s:20s} {b:12s} {k:8.2f} {c:9.2f} {c/k:6.3f}")
PY
