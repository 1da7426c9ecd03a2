#!/usr/bin/env bash
# Session 12 run 1: the ping-pong GEMM kernel (KILN_WGMMA_CFG=pingpong) verified (full suite with
# every problem forced onto it; quick suite with 1 and 3 resident CTAs, so CTAs walk many tiles
# and both turn counts), then timed against the cooperative default, three rotated rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s12/kiln; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: $(cat .carry/s12/commit) + working tree (ping-pong)"; } > $OUT/machine.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; env "$@" timeout 300 $B --no-store verify --version wgmma_tma_ws "${VA[@]}" >> $OUT/verify.txt 2>&1; local rc=$?; echo "verify $tag rc $rc: $(tail -1 $OUT/verify.txt)"; [ $rc -eq 0 ] || { echo STOP; tail -30 $OUT/verify.txt; exit 1; }; }
VA=(--suite full); v pp-full KILN_WGMMA_CFG=pingpong
VA=(--suite quick); v pp-grid1 KILN_WGMMA_CFG=pingpong KILN_WGMMA_GRID=1
VA=(--suite quick); v pp-grid3 KILN_WGMMA_CFG=pingpong KILN_WGMMA_GRID=3
: > $OUT/ab.jsonl
CASES="4096x4096x4096:RC 8192x8192x8192:RC 4096x4096x1024:RC 2048x2048x2048:RC 8192x14336x4096:RC 2048x4096x4096:RC 4096x4096x4096:CR"
V="coop pp"
for round in 1 2 3; do
  for c in $CASES; do
    s=${c%:*}; l=${c#*:}
    for v in $V; do
      E=X=1; [ $v = pp ] && E=KILN_WGMMA_CFG=pingpong
      r=$(env $E timeout 90 $B --no-store bench --shape $s --layout $l --reps 40 --json 2>>$OUT/err.txt)
      echo "{\"shape\":\"$s $l\",\"v\":\"$v\",\"round\":$round,\"r\":$r}" >> $OUT/ab.jsonl
    done
  done
  V="${V#* } ${V%% *}"
done
python3 .carry/s12/parse_ab.py $OUT/ab.jsonl | tee $OUT/summary.txt
