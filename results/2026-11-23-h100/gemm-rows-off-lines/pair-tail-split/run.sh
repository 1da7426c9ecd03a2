#!/usr/bin/env bash
# Session 15 run 15: pairs (rows off lines) whose last wave is sparse, with that wave split in
# the pair (binary i): default (unsplit pair, #63) against the pair with the last wave split
# 2, 3 and 5 ways, two rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
I=.carry/s15/kiln-i; chmod +x $I
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: i = ce39a45"; } > $OUT/machine.txt
: > $OUT/verify.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; timeout 300 env "$@" >> $OUT/verify.txt 2>&1; local rc=$?; echo "verify $tag rc $rc: $(grep -E '^\| wgmma_tma_ws ' $OUT/verify.txt | tail -1)"; }
for l in RC CR; do
  for sp in 2 5; do
    v "pair tail $sp $l" KILN_WGMMA_CFG=pair KILN_WGMMA_SPLITS=$sp KILN_WGMMA_TAIL=1 $I --no-store verify --version wgmma_tma_ws --shape 5000x5000x3000 --layout $l
    v "medium-pair tail $sp $l" KILN_WGMMA_CFG=medium-pair KILN_WGMMA_SPLITS=$sp KILN_WGMMA_TAIL=1 $I --no-store verify --version wgmma_tma_ws --shape 2000x3000x1000 --layout $l
  done
done
echo "verify: $(grep -cE '^\| wgmma_tma_ws +\| [0-9]+ +\| 0 ' $OUT/verify.txt) of $(grep -c '^==' $OUT/verify.txt) pass"
: > $OUT/ab.jsonl
for s in 5000x5000x5000 6000x3000x3000 3000x6000x3000 5000x5000x3000; do
  for cfg in default t2 t3 t5 t5 t3 t2 default; do
    E2=""; [ $cfg != default ] && E2="KILN_WGMMA_CFG=pair KILN_WGMMA_SPLITS=${cfg#t} KILN_WGMMA_TAIL=1"
    echo "{\"bin\":\"$cfg\",\"shape\":\"$s RC\"}" >> $OUT/ab.jsonl
    timeout 60 env KILN_X=0 $E2 $I --no-store --json bench --shape $s --reps 20 >> $OUT/ab.jsonl 2>> $OUT/err.txt
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
