#!/usr/bin/env bash
# Session 12 run 13: a 64x64 ping-pong tile (KILN_WGMMA_CFG=pingpong-tiny: one consumer per tile, all
# its K blocks) where the default runs the cooperative 64x64 tile whose two consumers split K
# (TINY64): verified (full suite forced, quick suite on 1 and 3 CTAs), then against the default.
# Binary: 959c830 + the 64x64 ping-pong tile.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s12/kiln-exp2; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: $(cat .carry/s12/commit-final) + 64x64 ping-pong tile"; } > $OUT/machine.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; env "$@" timeout 300 $B --no-store verify --version wgmma_tma_ws "${VA[@]}" >> $OUT/verify.txt 2>&1; local rc=$?; echo "verify $tag rc $rc: $(tail -1 $OUT/verify.txt)"; [ $rc -eq 0 ] || { echo STOP; tail -30 $OUT/verify.txt; exit 1; }; }
VA=(--suite full); v pptiny-full KILN_WGMMA_CFG=pingpong-tiny
VA=(--suite quick); v pptiny-grid1 KILN_WGMMA_CFG=pingpong-tiny KILN_WGMMA_GRID=1
VA=(--suite quick); v pptiny-grid3 KILN_WGMMA_CFG=pingpong-tiny KILN_WGMMA_GRID=3
: > $OUT/ab.jsonl
CASES="512x512x512:RC 512x512x512:CR 512x512x512:RR 512x512x512:CC 128x4096x4096:RC 128x4096x4096:CR 128x4096x4096:RR 128x4096x4096:CC 128x4096x14336:RC 64x4096x4096:RC 128x14336x4096:RC"
V="dflt pptiny"
for round in 1 2; do
  for c in $CASES; do
    s=${c%:*}; l=${c#*:}
    for v in $V; do
      E=X=1; [ $v = pptiny ] && E=KILN_WGMMA_CFG=pingpong-tiny
      r=$(env $E timeout 90 $B --no-store bench --shape $s --layout $l --reps 40 --json 2>>$OUT/err.txt)
      echo "{\"shape\":\"$s $l\",\"v\":\"$v\",\"round\":$round,\"r\":$r}" >> $OUT/ab.jsonl
    done
  done
  V="${V#* } ${V%% *}"
done
python3 .carry/s12/parse_ab.py $OUT/ab.jsonl | tee $OUT/summary.txt
