#!/usr/bin/env bash
# Session 15 run 13: the M <= 128 one-wave rule (binary i): full suite, sanitize, the default
# dispatch at the shapes it changes in every layout; then h against i, rotated (h i i h).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
H=.carry/s15/kiln-h; I=.carry/s15/kiln-i; chmod +x $H $I
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binaries: h = edb418e, i = h + the M <= 128 one-wave rule"; } > $OUT/machine.txt
: > $OUT/verify.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; timeout 300 env "$@" >> $OUT/verify.txt 2>&1; local rc=$?; echo "verify $tag rc $rc: $(grep -E '^\| wgmma_tma_ws ' $OUT/verify.txt | tail -1)"; }
v full $I --no-store verify --version wgmma_tma_ws --suite full
for l in RC CR RR CC; do
  for s in 128x5120x5120 96x5120x5120 128x8192x8192 100x4608x1000; do
    v "default $l $s" KILN_X=0 $I --no-store verify --version wgmma_tma_ws --shape $s --layout $l
  done
  v "default $l f32 beta" KILN_X=0 $I --no-store verify --version wgmma_tma_ws --shape 128x5120x1000 --layout $l --out f32 --beta 0.5
done
echo "verify: $(grep -cE '^\| wgmma_tma_ws +\| [0-9]+ +\| 0 ' $OUT/verify.txt) of $(grep -c '^==' $OUT/verify.txt) pass"
timeout 250 $I --no-store sanitize --version wgmma_tma_ws --timeout 100 > $OUT/sanitize.txt 2>&1; echo "sanitize rc $?"; tail -1 $OUT/sanitize.txt
: > $OUT/ab.jsonl
for sl in 128x5120x5120:RC 128x5120x5120:CC 128x4608x4096:RC 128x6144x6144:RC 128x8192x8192:RC 96x5120x5120:RC 128x5120x13824:RC 128x8192x28672:RC; do
  s=${sl%:*}; l=${sl#*:}
  for bin in h i i h; do
    [ $bin = h ] && X=$H || X=$I
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
print(f"{'shape':20s} {'kiln h':>7s} {'kiln i':>7s} {'i/h':>6s} {'ratio h':>7s} {'ratio i':>7s}")
for s in dict.fromkeys(k[0] for k in res):
    kh, ki, ch, ci = (st.median(res[(s, b, w)]) for b, w in (('h','kiln'),('i','kiln'),('h','cublas'),('i','cublas')))
    print(f"{s:20s} {kh:7.2f} {ki:7.2f} {ki/kh:6.3f} {ch/kh:7.3f} {ci/ki:7.3f}")
PY
