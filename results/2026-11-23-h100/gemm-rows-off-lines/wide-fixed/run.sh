#!/usr/bin/env bash
# Session 15 run 20: run 19 again after its fix (run 19: every tile narrower than 256 failed to
# compile: the discarded `if constexpr` branch was still checked). The 128x320 tile (binary k; `KILN_WGMMA_CFG=wide`): two wgmmas per k step
# (n192 + n128), a K-major B in two boxes of 160 rows, 3 stages, TMA-store epilogue only (f32 C
# and beta run 128x192). Verified forced in every layout (edges, f16, split-K over all tiles and
# the last wave, a small grid) and on the default dispatch; then j against k, rotated (j k k j).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
J=.carry/s15/kiln-j; K=.carry/s15/kiln-k; chmod +x $J $K
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binaries: j = b7162f7, k = j + the 128x320 tile, fixed, one wave only (uncommitted)"; } > $OUT/machine.txt
: > $OUT/verify.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; timeout 300 env "$@" >> $OUT/verify.txt 2>&1; local rc=$?; echo "verify $tag rc $rc: $(grep -E '^\| wgmma_tma_ws ' $OUT/verify.txt | tail -1)"; }
v full $K --no-store verify --version wgmma_tma_ws --suite full
for l in RC CR RR CC; do
  for s in 1024x5120x5120 1000x1500x700 129x321x65 300x2000x1000 4096x2560x2560; do
    v "wide $l $s" KILN_WGMMA_CFG=wide $K --no-store verify --version wgmma_tma_ws --shape $s --layout $l
  done
  v "wide $l f16" KILN_WGMMA_CFG=wide $K --no-store verify --version wgmma_tma_ws --shape 700x900x1000 --layout $l --dtype f16
  v "wide $l splits 3" KILN_WGMMA_CFG=wide KILN_WGMMA_SPLITS=3 KILN_WGMMA_TAIL=0 $K --no-store verify --version wgmma_tma_ws --shape 1000x1500x2000 --layout $l
  v "wide $l tail 3 grid 4" KILN_WGMMA_CFG=wide KILN_WGMMA_SPLITS=3 KILN_WGMMA_TAIL=1 KILN_WGMMA_GRID=4 $K --no-store verify --version wgmma_tma_ws --shape 1000x1500x2000 --layout $l
  v "wide $l grid 2" KILN_WGMMA_CFG=wide KILN_WGMMA_GRID=2 $K --no-store verify --version wgmma_tma_ws --shape 1000x1500x700 --layout $l
  v "default $l 1024x5120x1000 f32 beta" KILN_X=0 $K --no-store verify --version wgmma_tma_ws --shape 1024x5120x1000 --layout $l --out f32 --beta 0.5
  v "default $l 1024x5120x1000 bf16 beta" KILN_X=0 $K --no-store verify --version wgmma_tma_ws --shape 1024x5120x1000 --layout $l --beta 0.5
done
echo "verify: $(grep -cE '^\| wgmma_tma_ws +\| [0-9]+ +\| 0 ' $OUT/verify.txt) of $(grep -c '^==' $OUT/verify.txt) pass"
: > $OUT/ab.jsonl
for sl in 1024x5120x5120:RC 1024x5120x5120:CC 1024x5120x13824:RC 1024x5120x2048:RC 768x5120x5120:RC 1024x10240x4096:RC 4096x2560x2560:RC 3072x3072x3072:RC 4096x4096x4096:RC; do
  s=${sl%:*}; l=${sl#*:}
  for bin in j k k j; do
    [ $bin = j ] && X=$J || X=$K
    echo "{\"bin\":\"$bin\",\"shape\":\"$s $l\"}" >> $OUT/ab.jsonl
    $X --no-store --json bench --shape $s --layout $l --reps 20 >> $OUT/ab.jsonl 2>> $OUT/err.txt
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
print(f"{'shape':20s} {'kiln j':>7s} {'kiln k':>7s} {'k/j':>6s} {'ratio j':>7s} {'ratio k':>7s}")
for s in dict.fromkeys(k[0] for k in res):
    kj, kk, cj, ck = (st.median(res[(s, b, w)]) for b, w in (('j','kiln'),('k','kiln'),('j','cublas'),('k','cublas')))
    print(f"{s:20s} {kj:7.2f} {kk:7.2f} {kk/kj:6.3f} {cj/kj:7.3f} {ck/kk:7.3f}")
PY
