#!/usr/bin/env bash
# Session 15 run 5: the 128x192 pair defers all three epilogue chunks under the next tile's
# mainloop (binary d), not only the last (binary b). Verified forced in every layout (16-bit C,
# f16, multi-tile CTAs on a small grid), then timed b against d, rotated (b d d b).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s15/kiln-b; D=.carry/s15/kiln-d; chmod +x $B $D
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binaries: b = 5045141, d = b + all chunks deferred in 128x192 pairs"; } > $OUT/machine.txt
: > $OUT/verify.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; timeout 300 env "$@" >> $OUT/verify.txt 2>&1; local rc=$?; echo "verify $tag rc $rc: $(grep -E '^\| wgmma_tma_ws ' $OUT/verify.txt | tail -1)"; }
for l in RC CR RR CC; do
  for s in 3000x3000x3000 1000x1100x700 129x193x65 300x2000x1000; do
    v "medium-pair $l $s" KILN_WGMMA_CFG=medium-pair $D --no-store verify --version wgmma_tma_ws --shape $s --layout $l
  done
  v "medium-pair $l f16" KILN_WGMMA_CFG=medium-pair $D --no-store verify --version wgmma_tma_ws --shape 700x900x1000 --layout $l --dtype f16
  v "medium-pair $l grid 2" KILN_WGMMA_CFG=medium-pair KILN_WGMMA_GRID=2 $D --no-store verify --version wgmma_tma_ws --shape 1000x1500x700 --layout $l
  v "medium-pair $l splits 3" KILN_WGMMA_CFG=medium-pair KILN_WGMMA_SPLITS=3 $D --no-store verify --version wgmma_tma_ws --shape 1000x1500x2000 --layout $l
done
echo "verify: $(grep -cE '^\| wgmma_tma_ws +\| 1 +\| 0 ' $OUT/verify.txt) of $(grep -c '^==' $OUT/verify.txt) pass"
: > $OUT/ab.jsonl
for sl in 3000x3000x3000:RC 3000x3000x3000:CR 3000x3000x3000:RR 3000x3000x3000:CC 2992x2992x2992:RC 6000x3000x3000:RC; do
  s=${sl%:*}; l=${sl#*:}
  for bin in b d d b b d; do
    [ $bin = b ] && X=$B || X=$D
    echo "{\"bin\":\"$bin\",\"shape\":\"$s $l\"}" >> $OUT/ab.jsonl
    $X --no-store --json bench --shape $s --layout $l --reps 30 >> $OUT/ab.jsonl 2>> $OUT/err.txt
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
print(f"{'shape':20s} {'kiln b':>7s} {'kiln d':>7s} {'d/b':>6s} {'ratio b':>7s} {'ratio d':>7s}")
for s in dict.fromkeys(k[0] for k in res):
    kb, kd, cb, cd = (st.median(res[(s, b, w)]) for b, w in (('b','kiln'),('d','kiln'),('b','cublas'),('d','cublas')))
    print(f"{s:20s} {kb:7.2f} {kd:7.2f} {kd/kb:6.3f} {cb/kb:7.3f} {cd/kd:7.3f}")
PY
