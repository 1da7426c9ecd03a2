#!/usr/bin/env bash
# Session 15 run 8: is the straddled-rows loss latency the ring does not cover? (binary f = e +
# `KILN_WGMMA_EPI_BUFS=1`, one TMA-store staging chunk per consumer, which frees 16 KB for a 5th
# stage of the 128x192 tile). Forced configs verified, then timed in rotated rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
F=.carry/s15/kiln-f; chmod +x $F
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: f = 5aa934d + KILN_WGMMA_EPI_BUFS"; } > $OUT/machine.txt
: > $OUT/verify.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; timeout 300 env "$@" >> $OUT/verify.txt 2>&1; local rc=$?; echo "verify $tag rc $rc: $(grep -E '^\| wgmma_tma_ws ' $OUT/verify.txt | tail -1)"; }
for l in RC CR RR CC; do
  for cfg in medium-pair medium; do
    for st in 4 5; do
      v "$cfg bufs 1 stages $st $l" KILN_WGMMA_CFG=$cfg KILN_WGMMA_EPI_BUFS=1 KILN_WGMMA_STAGES=$st $F --no-store verify --version wgmma_tma_ws --shape 1000x1100x700 --layout $l
    done
  done
  v "pair bufs 1 $l" KILN_WGMMA_CFG=pair KILN_WGMMA_EPI_BUFS=1 $F --no-store verify --version wgmma_tma_ws --shape 1000x1100x700 --layout $l
  v "default bufs 1 $l" KILN_WGMMA_EPI_BUFS=1 $F --no-store verify --version wgmma_tma_ws --shape 3000x3000x3000 --layout $l
done
echo "verify: $(grep -cE '^\| wgmma_tma_ws +\| [0-9]+ +\| 0 ' $OUT/verify.txt) of $(grep -c '^==' $OUT/verify.txt) pass"
: > $OUT/ab.jsonl
run() { local tag=$1 s=$2 l=$3; shift 3; echo "{\"bin\":\"$tag\",\"shape\":\"$s $l\"}" >> $OUT/ab.jsonl; env "$@" $F --no-store --json bench --shape $s --layout $l --reps 30 >> $OUT/ab.jsonl 2>> $OUT/err.txt; }
for sl in 3000x3000x3000:RC 3000x3000x3000:CC 2992x2992x2992:RC 3072x3072x3072:RC; do
  s=${sl%:*}; l=${sl#*:}
  for r in 1 2; do
    run "default(4st,2buf)" $s $l KILN_X=0
    run "bufs1 4st" $s $l KILN_WGMMA_EPI_BUFS=1
    run "bufs1 5st" $s $l KILN_WGMMA_EPI_BUFS=1 KILN_WGMMA_STAGES=5
  done
done
for r in 1 2; do
  run "pair 2buf" 6000x3000x3000 RC KILN_WGMMA_CFG=pair
  run "pair bufs1" 6000x3000x3000 RC KILN_WGMMA_CFG=pair KILN_WGMMA_EPI_BUFS=1
  run "mpair bufs1 5st" 6000x3000x3000 RC KILN_WGMMA_CFG=medium-pair KILN_WGMMA_EPI_BUFS=1 KILN_WGMMA_STAGES=5
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
print(f"{'shape':20s} {'config':18s} {'kiln us':>8s} {'cublas us':>9s} {'ratio':>6s}")
for (s, b) in dict.fromkeys(k[:2] for k in res):
    k, c = st.median(res[(s, b, 'kiln')]), st.median(res[(s, b, 'cublas')])
    print(f"{s:20s} {b:18s} {k:8.2f} {c:9.2f} {c/k:6.3f}")
PY
