#!/usr/bin/env bash
# Session 14 run 8: the rule from partial-m/ (64 < M < 112, K-major A: one 128x64 ping-pong tile
# with A's box trimmed to M instead of two 64x64 tiles), binary e. Verified at shapes it picks,
# then timed against binary d, rotated (d e e d), including narrower N (fewer CTAs) and long K.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
D=.carry/s14/kiln-d; E=.carry/s14/kiln-e; chmod +x $D $E
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binaries: d (before), e (the rule)"; } > $OUT/machine.txt
: > $OUT/verify.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; timeout 300 "$@" >> $OUT/verify.txt 2>&1; echo "verify $tag rc $?: $(grep -E '^\| wgmma_tma_ws ' $OUT/verify.txt | tail -1)"; }
for l in RC RR; do
  for s in 96x4096x4096 72x1000x1032 100x4096x14336 111x520x264; do
    v "$l $s" $E --no-store verify --version wgmma_tma_ws --shape $s --layout $l
  done
  v "$l f32 beta" $E --no-store verify --version wgmma_tma_ws --shape 80x1024x1032 --layout $l --out f32 --beta 0.5
  v "$l f16" $E --no-store verify --version wgmma_tma_ws --shape 90x2048x520 --layout $l --dtype f16
done
: > $OUT/ab.jsonl
for s in 72x4096x4096 80x4096x4096 96x4096x4096 100x4096x4096 110x4096x4096 120x4096x4096 96x2048x4096 96x1024x4096 96x4096x14336 80x4096x1024; do
  for bin in d e e d; do
    [ $bin = d ] && X=$D || X=$E
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
print(f"{'shape':16s} {'kiln d':>7s} {'kiln e':>7s} {'e/d':>6s} {'cub d':>7s} {'cub e':>7s} {'ratio d':>7s} {'ratio e':>7s}")
for s in dict.fromkeys(k[0] for k in res):
    kc, kd, cc, cd = (st.median(res[(s, b, w)]) for b, w in (('d','kiln'),('e','kiln'),('d','cublas'),('e','cublas')))
    print(f"{s:16s} {kc:7.2f} {kd:7.2f} {kd/kc:6.3f} {cc:7.2f} {cd:7.2f} {cc/kc:7.3f} {cd/kd:7.3f}")
PY
