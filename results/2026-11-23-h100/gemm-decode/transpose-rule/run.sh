#!/usr/bin/env bash
# Session 14 run 11: the transposed copy of A only where it won in transpose-a/ (CR at M < 128,
# not a multiple of 64; CC with M mod 64 <= 8), binary h. Verified: the full suite, CR/CC at
# decode shapes with f16, f32 C and beta, odd lda, sanitize; then timed against binary f
# (50d4904), rotated (f h h f).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
F=.carry/s14/kiln-f; H=.carry/s14/kiln-h; chmod +x $F $H
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binaries: f (50d4904), h (A transposed where it won)"; } > $OUT/machine.txt
: > $OUT/verify.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; timeout 300 "$@" >> $OUT/verify.txt 2>&1; echo "verify $tag rc $?: $(grep -E '^\| wgmma_tma_ws ' $OUT/verify.txt | tail -1)"; }
v full $H --no-store verify --version wgmma_tma_ws --suite full
for l in CC CR; do
  for s in 8x4096x4096 40x1000x1032 72x4096x4096 100x520x264 127x129x4104; do
    v "$l $s" $H --no-store verify --version wgmma_tma_ws --shape $s --layout $l
  done
  v "$l f32 beta" $H --no-store verify --version wgmma_tma_ws --shape 24x1024x1032 --layout $l --out f32 --beta 0.5
  v "$l f16" $H --no-store verify --version wgmma_tma_ws --shape 90x2048x520 --layout $l --dtype f16
  v "$l lda 9" $H --no-store verify --version wgmma_tma_ws --shape 8x512x264 --layout $l --lda 9
  v "$l lda 1 m 1" $H --no-store verify --version wgmma_tma_ws --shape 1x512x264 --layout $l --lda 8
done
timeout 200 $H --no-store sanitize --version wgmma_tma_ws --timeout 100 > $OUT/sanitize.txt 2>&1; echo "sanitize rc $?"; tail -1 $OUT/sanitize.txt
: > $OUT/ab.jsonl
for s in "8x4096x4096 CC" "16x4096x4096 CC" "32x4096x4096 CC" "72x4096x4096 CC" "96x4096x4096 CC" "8x14336x4096 CC" "16x4096x14336 CC" "8x4096x4096 CR" "40x4096x4096 CR" "100x4096x4096 CR"; do
  set -- $s
  for bin in f h h f; do
    [ $bin = f ] && X=$F || X=$H
    echo "{\"bin\":\"$bin\",\"shape\":\"$1 $2\"}" >> $OUT/ab.jsonl
    $X --no-store --json bench --shape $1 --layout $2 --reps 30 >> $OUT/ab.jsonl 2>> $OUT/err.txt
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
print(f"{'shape':18s} {'kiln f':>7s} {'kiln h':>7s} {'h/f':>6s} {'cub f':>7s} {'cub h':>7s} {'ratio f':>7s} {'ratio h':>7s}")
for s in dict.fromkeys(k[0] for k in res):
    kc, kd, cc, cd = (st.median(res[(s, b, w)]) for b, w in (('f','kiln'),('h','kiln'),('f','cublas'),('h','cublas')))
    print(f"{s:18s} {kc:7.2f} {kd:7.2f} {kd/kc:6.3f} {cc:7.2f} {cd:7.2f} {cc/kc:7.3f} {cd/kd:7.3f}")
PY
