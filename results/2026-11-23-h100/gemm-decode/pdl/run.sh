#!/usr/bin/env bash
# Session 14 run 14: the GEMM launched as the programmatic dependent of the copy before it
# (transposed A, padded A/B, C's scratch filled for beta), binary i; KILN_WGMMA_PDL=0 launches it
# after the copy as before. Verified: the full suite, every copy path, compute-sanitizer on copy
# paths; then i against i with PDL off, rotated (off on on off).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
I=.carry/s14/kiln-i; chmod +x $I
CS=/usr/local/cuda/bin/compute-sanitizer
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: i (2a191cb + PDL after copies)"; } > $OUT/machine.txt
: > $OUT/verify.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; timeout 300 "$@" >> $OUT/verify.txt 2>&1; echo "verify $tag rc $?: $(grep -E '^\| wgmma_tma_ws ' $OUT/verify.txt | tail -1)"; }
v full $I --no-store verify --version wgmma_tma_ws --suite full
v "CC 8x4096x4096" $I --no-store verify --version wgmma_tma_ws --shape 8x4096x4096 --layout CC
v "CR 100x520x264 f32 beta" $I --no-store verify --version wgmma_tma_ws --shape 100x520x264 --layout CR --out f32 --beta 0.5
v "1023 (A, B, C copied)" $I --no-store verify --version wgmma_tma_ws --shape 1023
v "1023x1023x1024 beta (C filled)" $I --no-store verify --version wgmma_tma_ws --shape 1023x1023x1024 --beta 0.5
v "777x1234x999 CC f32 beta" $I --no-store verify --version wgmma_tma_ws --shape 777x1234x999 --layout CC --out f32 --beta 1
v "A only" $I --no-store verify --version wgmma_tma_ws --shape 1023x512x1023 --ldb 1024
: > $OUT/sanitize.txt
for tool in memcheck racecheck synccheck initcheck; do
  for s in "8x512x264 CC" "40x256x520 CR" "255x200x131 RC"; do
    set -- $s
    echo "== $tool $1 $2" >> $OUT/sanitize.txt
    timeout 120 $CS --tool $tool --error-exitcode 9 $I --no-store verify --version wgmma_tma_ws --shape $1 --layout $2 >> $OUT/sanitize.txt 2>&1
    echo "sanitize $tool $1 $2 rc $?"
  done
done
: > $OUT/ab.jsonl
for s in "8x4096x4096 CC" "72x4096x4096 CC" "8x4096x4096 CR" "100x4096x4096 CR" "8x14336x4096 CC" "1023x1023x1023 RC" "500x500x500 RC" "128x4096x4095 RC"; do
  set -- $s
  for mode in off on on off; do
    [ $mode = off ] && P=0 || P=1
    echo "{\"bin\":\"$mode\",\"shape\":\"$1 $2\"}" >> $OUT/ab.jsonl
    KILN_WGMMA_PDL=$P $I --no-store --json bench --shape $1 --layout $2 --reps 30 >> $OUT/ab.jsonl 2>> $OUT/err.txt
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
print(f"{'shape':20s} {'PDL off':>7s} {'PDL on':>7s} {'on/off':>6s} {'cuBLAS':>7s} {'ratio off':>9s} {'ratio on':>8s}")
for s in dict.fromkeys(k[0] for k in res):
    a, b = st.median(res[(s, 'off', 'kiln')]), st.median(res[(s, 'on', 'kiln')])
    c = st.median(res[(s, 'off', 'cublas')] + res[(s, 'on', 'cublas')])
    print(f"{s:20s} {a:7.2f} {b:7.2f} {b/a:6.3f} {c:7.2f} {c/a:9.3f} {c/b:8.3f}")
PY
