#!/usr/bin/env bash
# Session 11 run 14: single CTAs issue their first unit's first stages before the block's sync
# (thread 0 right after initialising the barriers; tensor maps prefetched at entry), against main
# (810cb71). Verify (default full suite, pairs forced, stream-K and split-K on small grids), the
# timeline of the new kernel, then old vs new in three rotated rounds, cuBLAS in each process.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
O=.carry/s11/kiln-head; N=.carry/s11/kiln-early; chmod +x $O $N
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "old: main $(cat .carry/s11/commit-head); new: + early.diff (timeline + early loads)"; } > $OUT/machine.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; env "$@" timeout 240 $N --no-store verify --version wgmma_tma_ws "${VA[@]}" >> $OUT/verify.txt 2>&1; local rc=$?; echo "verify $tag rc $rc: $(tail -1 $OUT/verify.txt)"; [ $rc -eq 0 ] || { echo STOP; exit 1; }; }
VA=(--suite full); v full X=1
VA=(--suite full); v pairs KILN_WGMMA_CFG=pair
VA=(--suite quick); v sk-grid5 KILN_WGMMA_SK=1 KILN_WGMMA_GRID=5
VA=(--suite quick); v split3-grid7 KILN_WGMMA_SPLITS=3 KILN_WGMMA_GRID=7
VA=(--suite quick); v tiny64-grid3 KILN_WGMMA_CFG=tiny64 KILN_WGMMA_GRID=3
for s in 512x512x512 1024x1024x1024 512x4096x4096; do timeout 60 $N --no-store profile gemm wgmma_tma_ws --shape $s --timeline --reps 5 >> $OUT/timeline.txt 2>&1; done
: > $OUT/ab.jsonl
CASES="512x512x512:RC 1024x1024x1024:RC 512x4096x4096:RC 128x4096x4096:RC 2048x2048x2048:RC 4096x4096x4096:RC 512x512x512:CC 1024x1024x1024:CC"
V="old new"
for round in 1 2 3; do
  for c in $CASES; do
    s=${c%:*}; l=${c#*:}
    for v in $V; do
      B=$O; [ $v = new ] && B=$N
      r=$(timeout 90 $B --no-store bench --shape $s --layout $l --reps 60 --json 2>>$OUT/verify.txt)
      echo "{\"shape\":\"$s $l\",\"v\":\"$v\",\"round\":$round,\"r\":$r}" >> $OUT/ab.jsonl
    done
  done
  V="${V#* } ${V%% *}"
done
python3 .carry/s11/parse_ab.py $OUT/ab.jsonl | tee $OUT/summary.txt
grep -A11 '^wgmma_tma_ws on' $OUT/timeline.txt | grep -E 'on |entry|synced|first stage|consumer 0: first|mainloop|consumer 0: done'
