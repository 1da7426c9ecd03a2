#!/usr/bin/env bash
# Session 15 run 16: pairs split a sparse last wave as pairs (binary j). Full suite, sanitize,
# the default dispatch at the changed shapes in every layout; then i against j, rotated (i j j i).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
I=.carry/s15/kiln-i; J=.carry/s15/kiln-j; chmod +x $I $J
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binaries: i = ce39a45, j = i + pairs split a sparse last wave"; } > $OUT/machine.txt
: > $OUT/verify.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; timeout 300 env "$@" >> $OUT/verify.txt 2>&1; local rc=$?; echo "verify $tag rc $rc: $(grep -E '^\| wgmma_tma_ws ' $OUT/verify.txt | tail -1)"; }
v full $J --no-store verify --version wgmma_tma_ws --suite full
for l in RC CR RR CC; do
  for s in 6000x3000x3000 5000x5000x3000; do
    v "default $l $s" KILN_X=0 $J --no-store verify --version wgmma_tma_ws --shape $s --layout $l
  done
  v "default $l f32 beta" KILN_X=0 $J --no-store verify --version wgmma_tma_ws --shape 3000x6000x1000 --layout $l --out f32 --beta 0.5
done
echo "verify: $(grep -cE '^\| wgmma_tma_ws +\| [0-9]+ +\| 0 ' $OUT/verify.txt) of $(grep -c '^==' $OUT/verify.txt) pass"
timeout 250 $J --no-store sanitize --version wgmma_tma_ws --timeout 100 > $OUT/sanitize.txt 2>&1; echo "sanitize rc $?"; tail -1 $OUT/sanitize.txt
: > $OUT/ab.jsonl
for sl in 5000x5000x5000:RC 5000x5000x5000:CR 6000x3000x3000:RC 6000x3000x3000:CC 3000x6000x3000:RC 5000x5000x3000:RC 4000x4000x4000:RC 512x128256x4096:RC; do
  s=${sl%:*}; l=${sl#*:}
  for bin in i j j i; do
    [ $bin = i ] && X=$I || X=$J
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
print(f"{'shape':20s} {'kiln i':>7s} {'kiln j':>7s} {'j/i':>6s} {'ratio i':>7s} {'ratio j':>7s}")
for s in dict.fromkeys(k[0] for k in res):
    ki, kj, ci, cj = (st.median(res[(s, b, w)]) for b, w in (('i','kiln'),('j','kiln'),('i','cublas'),('j','cublas')))
    print(f"{s:20s} {ki:7.2f} {kj:7.2f} {kj/ki:6.3f} {ci/ki:7.3f} {cj/kj:7.3f}")
PY
