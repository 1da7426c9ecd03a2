#!/usr/bin/env bash
# Session 14 run 6: a K-major A box only as tall as M (rounded up to 8) when M is under the tile
# (binary d). Verified first: the full suite on the default dispatch, every tile config forced on
# shapes with M under the tile in both K-major-A layouts (RC, RR) with 16-bit and f32 C, split-K
# and stream-K forced, sanitize; then timed against binary c at Mx4096x4096 and decode shapes,
# rotated (c d d c).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
C=.carry/s14/kiln-c; D=.carry/s14/kiln-d; chmod +x $C $D
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binaries: c (before), d (A box trimmed)"; } > $OUT/machine.txt
: > $OUT/verify.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; timeout 300 env "$@" >> $OUT/verify.txt 2>&1; local rc=$?; echo "verify $tag rc $rc: $(grep -E '^\| wgmma_tma_ws ' $OUT/verify.txt | tail -1)"; }
v full KILN_X=0 $D --no-store verify --version wgmma_tma_ws --suite full
for cfg in large pair small tiny tiny64 pingpong pingpong64 pingpong-tiny medium; do
  for l in RC RR; do
    for s in 1x256x1032 8x4096x4096 40x1000x264 100x777x1032 127x129x4104; do
      v "$cfg $l $s" KILN_WGMMA_CFG=$cfg $D --no-store verify --version wgmma_tma_ws --shape $s --layout $l
    done
    v "$cfg $l f32 beta" KILN_WGMMA_CFG=$cfg $D --no-store verify --version wgmma_tma_ws --shape 40x520x1032 --layout $l --out f32 --beta 0.5
  done
done
for sp in 2 3; do
  for s in 100x4096x4096 40x2048x1032; do
    v "small splits $sp $s" KILN_WGMMA_CFG=small KILN_WGMMA_SPLITS=$sp $D --no-store verify --version wgmma_tma_ws --shape $s
    v "large splits $sp grid 8 $s" KILN_WGMMA_CFG=large KILN_WGMMA_SPLITS=$sp KILN_WGMMA_GRID=8 $D --no-store verify --version wgmma_tma_ws --shape $s
  done
done
v "stream-k grid 5" KILN_WGMMA_CFG=small KILN_WGMMA_GRID=5 $D --no-store verify --version wgmma_tma_ws --shape 100x1408x1032
grep -c "PASS\|pass" $OUT/verify.txt > /dev/null
echo "verify lines with FAIL: $(grep -ci 'fail' $OUT/verify.txt)"
timeout 200 $D --no-store sanitize --version wgmma_tma_ws --timeout 100 > $OUT/sanitize.txt 2>&1; echo "sanitize rc $?"; tail -2 $OUT/sanitize.txt
: > $OUT/ab.jsonl
for s in 1x4096x4096 8x4096x4096 16x4096x4096 32x4096x4096 48x4096x4096 64x4096x4096 100x4096x4096 8x14336x4096 16x4096x14336 128x4096x4096; do
  for bin in c d d c; do
    [ $bin = c ] && X=$C || X=$D
    echo "{\"bin\":\"$bin\",\"shape\":\"$s\"}" >> $OUT/ab.jsonl
    $X --no-store --json bench --shape $s --reps 30 >> $OUT/ab.jsonl 2>> $OUT/err.txt
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
print(f"{'shape':16s} {'kiln c':>7s} {'kiln d':>7s} {'d/c':>6s} {'cub c':>7s} {'cub d':>7s} {'ratio c':>7s} {'ratio d':>7s}")
for s in dict.fromkeys(k[0] for k in res):
    kc, kd, cc, cd = (st.median(res[(s, b, w)]) for b, w in (('c','kiln'),('d','kiln'),('c','cublas'),('d','cublas')))
    print(f"{s:16s} {kc:7.2f} {kd:7.2f} {kd/kc:6.3f} {cc:7.2f} {cd:7.2f} {cc/kc:7.3f} {cd/kd:7.3f}")
PY
