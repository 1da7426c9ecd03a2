#!/usr/bin/env bash
# Session 12 run 9: a 128x64 ping-pong tile (KILN_WGMMA_CFG=pingpong64) where the heuristic runs
# one wave of cooperative 128x64 tiles (1024^3, 256x4096x4096, 512x2048x4096): verified (full
# suite forced onto it; quick suite with 1 and 3 resident CTAs), then against the default, two
# rotated rounds. Binary: main de46203 + PINGPONG64 + the rule widened to f32 / beta != 0.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s12/kiln-exp; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: $(cat .carry/s12/commit-new2) + PINGPONG64, rule widened"; } > $OUT/machine.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; env "$@" timeout 300 $B --no-store verify --version wgmma_tma_ws "${VA[@]}" >> $OUT/verify.txt 2>&1; local rc=$?; echo "verify $tag rc $rc: $(tail -1 $OUT/verify.txt)"; [ $rc -eq 0 ] || { echo STOP; tail -30 $OUT/verify.txt; exit 1; }; }
VA=(--suite full); v pp64-full KILN_WGMMA_CFG=pingpong64
VA=(--suite quick); v pp64-grid1 KILN_WGMMA_CFG=pingpong64 KILN_WGMMA_GRID=1
VA=(--suite quick); v pp64-grid3 KILN_WGMMA_CFG=pingpong64 KILN_WGMMA_GRID=3
: > $OUT/ab.jsonl
CASES="1024x1024x1024:RC 1024x1024x1024:CR 1024x1024x1024:RR 1024x1024x1024:CC 256x4096x4096:RC 512x2048x4096:RC 128x4096x4096:RC 512x4096x4096:RC"
V="dflt pp64"
for round in 1 2; do
  for c in $CASES; do
    s=${c%:*}; l=${c#*:}
    for v in $V; do
      E=X=1; [ $v = pp64 ] && E=KILN_WGMMA_CFG=pingpong64
      r=$(env $E timeout 90 $B --no-store bench --shape $s --layout $l --reps 40 --json 2>>$OUT/err.txt)
      echo "{\"shape\":\"$s $l\",\"v\":\"$v\",\"round\":$round,\"r\":$r}" >> $OUT/ab.jsonl
    done
  done
  V="${V#* } ${V%% *}"
done
python3 .carry/s12/parse_ab.py $OUT/ab.jsonl | tee $OUT/summary.txt
