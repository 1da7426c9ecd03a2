#!/usr/bin/env bash
# Session 13 run 8: (1) GemmProblem::canonical (a 1-row column-major A or 1-column row-major B
# with leading dimension 1 taken in the other orientation, so TMA can address it; survey/:
# 1x4096x4096 CC ran on mma_sync at 0.12x) and MEDIUM in the heuristic: full suite, default
# dispatch; old (f6be432) vs new at degenerate shapes. (2) MEDIUM where rows straddle 128-byte
# lines (the heuristic now picks it at 3000^3): forced configs at 3000^3, 2992^3, 1000^3.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
O=.carry/s13/kiln-f6be432; N=.carry/s13/kiln-canon; chmod +x $O $N
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "old: f6be432; new: + MEDIUM + canonical"; } > $OUT/machine.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; env "$@" timeout 300 $N --no-store verify "${VA[@]}" >> $OUT/verify.txt 2>&1; local rc=$?; echo "verify $tag rc $rc: $(tail -1 $OUT/verify.txt)"; [ $rc -eq 0 ] || { echo STOP; tail -30 $OUT/verify.txt; exit 1; }; }
VA=(--version wgmma_tma_ws --suite full); v ws-full X=1
for s in 1x4096x4096:CC 1x300x200:CC 1x300x200:CR 64x1x4096:RR 64x1x4096:CR 1x1x4096:CR 128x96x1:RC 128x96x1:CC; do
  VA=(--shape ${s%:*} --layout ${s#*:}); v "default-$s" X=1
done
: > $OUT/ab.jsonl
CASES="1x4096x4096:CC 1x14336x4096:CC 1x4096x4096:RC 64x1x4096:RR 3000x3000x3000:RC 2992x2992x2992:RC 1000x1000x1000:RC 3072x3072x3072:RC"
V="old new"
for round in 1 2; do
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
for s in 3000 2992 1000; do
  for cfg in medium pair large; do
    r=$(KILN_WGMMA_CFG=$cfg timeout 90 $N --no-store bench --shape $s --reps 30 --json 2>>$OUT/err.txt)
    echo "{\"shape\":\"${s}x${s}x${s} RC\",\"v\":\"$cfg\",\"round\":1,\"r\":$r}" >> $OUT/ab.jsonl
  done
done
python3 .carry/s13/parse_ab.py $OUT/ab.jsonl | tee $OUT/summary.txt
