#!/usr/bin/env bash
# Session 13 run 4: TINY64's hand-off of consumer 1's partials through two mbarriers instead of
# named barriers 4/5 (ledger #41: racecheck flagged the named-barrier hand-off). New binary =
# 732be8e + the change. compute-sanitizer at kiln's sanitize shapes (default dispatch, and
# tiny64 forced), the full suite with tiny64 forced, the quick suite on 1 and 3 resident CTAs,
# then old vs new with tiny64 forced, three rotated rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
O=.carry/s13/kiln; N=.carry/s13/kiln-handoff; chmod +x $O $N
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "old: $(cat .carry/s13/commit); new: + mbarrier hand-off"; } > $OUT/machine.txt
: > $OUT/sanitize.txt
for cfg in default tiny64; do
  E=X=1; [ $cfg != default ] && E=KILN_WGMMA_CFG=$cfg
  echo "== $cfg" >> $OUT/sanitize.txt
  env $E timeout 280 $N --no-store sanitize --version wgmma_tma_ws --timeout 120 >> $OUT/sanitize.txt 2>&1
  echo "sanitize $cfg rc $?"
done
tail -16 $OUT/sanitize.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; env "$@" timeout 300 $N --no-store verify --version wgmma_tma_ws "${VA[@]}" >> $OUT/verify.txt 2>&1; local rc=$?; echo "verify $tag rc $rc: $(tail -1 $OUT/verify.txt)"; [ $rc -eq 0 ] || { echo STOP; tail -30 $OUT/verify.txt; exit 1; }; }
VA=(--suite full); v tiny64-full KILN_WGMMA_CFG=tiny64
VA=(--suite quick); v tiny64-grid1 KILN_WGMMA_CFG=tiny64 KILN_WGMMA_GRID=1
VA=(--suite quick); v tiny64-grid3 KILN_WGMMA_CFG=tiny64 KILN_WGMMA_GRID=3
VA=(--suite quick); v default
: > $OUT/ab.jsonl
CASES="512x512x512:RC 512x512x512:CC 128x4096x4096:RC 500x500x500:RC 1000x1000x1000:RC"
V="old new"
for round in 1 2 3; do
  for c in $CASES; do
    s=${c%:*}; l=${c#*:}
    for v in $V; do
      B=$O; [ $v = new ] && B=$N
      r=$(KILN_WGMMA_CFG=tiny64 timeout 90 $B --no-store bench --shape $s --layout $l --reps 40 --json 2>>$OUT/err.txt)
      echo "{\"shape\":\"$s $l\",\"v\":\"$v\",\"round\":$round,\"r\":$r}" >> $OUT/ab.jsonl
    done
  done
  V="${V#* } ${V%% *}"
done
python3 .carry/s13/parse_ab.py $OUT/ab.jsonl | tee $OUT/summary.txt
