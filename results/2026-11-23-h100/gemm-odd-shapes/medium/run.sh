#!/usr/bin/env bash
# Session 13 run 7: a 128x192 cooperative tile (TileConfig::MEDIUM, 4 stages of 40 KB) for shapes
# whose N quantises badly into 256-wide tiles (survey/: 3072^3 0.81x). New binary = f6be432 +
# MEDIUM (heuristic picks it at 3072^3, nowhere in issue 3's set). Verified forced (full suite,
# quick on 1 and 3 CTAs, split-K and stream-K), then main vs new default, rotated rounds, plus
# forced alternatives at 3072^3.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
O=.carry/s13/kiln-f6be432; N=.carry/s13/kiln-medium; chmod +x $O $N
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "old: f6be432; new: + MEDIUM 128x192"; } > $OUT/machine.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; env "$@" timeout 300 $N --no-store verify --version wgmma_tma_ws "${VA[@]}" >> $OUT/verify.txt 2>&1; local rc=$?; echo "verify $tag rc $rc: $(tail -1 $OUT/verify.txt)"; [ $rc -eq 0 ] || { echo STOP; tail -30 $OUT/verify.txt; exit 1; }; }
VA=(--suite full); v medium-full KILN_WGMMA_CFG=medium
VA=(--suite quick); v medium-grid1 KILN_WGMMA_CFG=medium KILN_WGMMA_GRID=1
VA=(--suite quick); v medium-grid3 KILN_WGMMA_CFG=medium KILN_WGMMA_GRID=3
w() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; env "$@" timeout 300 $N --no-store verify --version wgmma_tma_ws "${VA[@]}" >> $OUT/verify.txt 2>&1; echo "verify $tag rc $?: $(tail -1 $OUT/verify.txt)"; }
VA=(--suite quick); w medium-split3 KILN_WGMMA_CFG=medium KILN_WGMMA_SPLITS=3
VA=(--suite quick); w medium-sk KILN_WGMMA_CFG=medium KILN_WGMMA_SK=1 KILN_WGMMA_GRID=5
VA=(--suite quick); v default
: > $OUT/ab.jsonl
CASES="3072x3072x3072:RC 3072x3072x3072:CR 3072x3072x3072:RR 3072x3072x3072:CC 1536x1536x1536:RC 2048x3072x3072:RC 4096x3072x8192:RC 8192x3072x8192:RC 6144x6144x6144:RC 4096x4096x4096:RC"
V="old new"
for round in 1 2 3; do
  for c in $CASES; do
    s=${c%:*}; l=${c#*:}
    for v in $V; do
      B=$O; [ $v = new ] && B=$N
      r=$(timeout 90 $B --no-store bench --shape $s --layout $l --reps 30 --json 2>>$OUT/err.txt)
      echo "{\"shape\":\"$s $l\",\"v\":\"$v\",\"round\":$round,\"r\":$r}" >> $OUT/ab.jsonl
    done
  done
  V="${V#* } ${V%% *}"
done
for e in "KILN_WGMMA_CFG=large KILN_WGMMA_SK=1" "KILN_WGMMA_CFG=medium KILN_WGMMA_SK=1" "KILN_WGMMA_CFG=small KILN_WGMMA_SK=1" "KILN_WGMMA_CFG=pair"; do
  r=$(env $e timeout 90 $N --no-store bench --shape 3072 --reps 30 --json 2>>$OUT/err.txt)
  echo "{\"shape\":\"3072x3072x3072 RC\",\"v\":\"${e// /+}\",\"round\":1,\"r\":$r}" >> $OUT/ab.jsonl
done
python3 .carry/s13/parse_ab.py $OUT/ab.jsonl | tee $OUT/summary.txt
