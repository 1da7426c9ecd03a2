#!/usr/bin/env bash
# Session 17 run 7: an MN-major B of the 224-wide tile read by two wgmmas per k-step, m64n192
# over three whole 64-column swizzle atoms and m64n32 over the half atom (binary e = c + that),
# against one m64n224 (binary c). Forced checks in CR and RR (every other variant's SASS is
# unchanged), memcheck and racecheck in RR; then c forced, e forced and e's default at the
# MN-major shapes of run 6, rotated c e def def e c.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
C=.carry/s17/kiln-c; E=.carry/s17/kiln-e; chmod +x $C $E
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binaries: c (final 224 rule), e = c + MN-major 224 as n192 + n32 wgmmas"; } > $OUT/machine.txt
: > $OUT/verify.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; timeout 300 env "$@" >> $OUT/verify.txt 2>&1; echo "verify $tag rc $?: $(grep -E '^\| wgmma_tma_ws ' $OUT/verify.txt | tail -1)"; }
for l in CR RR; do
  for s in 1024x3584x4096 1000x1504x700 129x344x65 300x2000x1000 2048x3584x1000 5x28672x1000; do
    v "n224 $l $s" KILN_WGMMA_CFG=n224 $E --no-store verify --version wgmma_tma_ws --shape $s --layout $l
  done
  v "n224 $l f16" KILN_WGMMA_CFG=n224 $E --no-store verify --version wgmma_tma_ws --shape 700x904x1000 --layout $l --dtype f16
  v "n224 $l splits 3" KILN_WGMMA_CFG=n224 KILN_WGMMA_SPLITS=3 KILN_WGMMA_TAIL=0 $E --no-store verify --version wgmma_tma_ws --shape 1000x1512x2000 --layout $l
  v "n224 $l tail 3 grid 4" KILN_WGMMA_CFG=n224 KILN_WGMMA_SPLITS=3 KILN_WGMMA_TAIL=1 KILN_WGMMA_GRID=4 $E --no-store verify --version wgmma_tma_ws --shape 1000x1512x2000 --layout $l
  v "n224 $l stream-K grid 5" KILN_WGMMA_CFG=n224 KILN_WGMMA_SK=1 KILN_WGMMA_GRID=5 $E --no-store verify --version wgmma_tma_ws --shape 1000x1512x2000 --layout $l
  v "n224 $l grid 2" KILN_WGMMA_CFG=n224 KILN_WGMMA_GRID=2 $E --no-store verify --version wgmma_tma_ws --shape 1000x1504x700 --layout $l
done
echo "verify: $(grep -cE '^\| wgmma_tma_ws +\| [0-9]+ +\| 0 ' $OUT/verify.txt) of $(grep -c '^==' $OUT/verify.txt) pass"
for t in memcheck racecheck; do
  timeout 120 env KILN_WGMMA_CFG=n224 /usr/local/cuda/bin/compute-sanitizer --tool $t --error-exitcode 99 $E --no-store verify --version wgmma_tma_ws --shape 300x2000x200 --layout RR > $OUT/sanitize-$t-RR.txt 2>&1
  echo "sanitize $t RR rc $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/sanitize-$t-RR.txt | tail -1)"
done
: > $OUT/sweep.jsonl
for sl in 1024x3584x18944:CR 1024x3584x18944:RR 2048x3584x18944:CR 2048x3584x18944:RR 4096x3584x18944:CR 4096x3584x18944:RR 512x14336x4096:CR 512x14336x4096:RR 1024x7168x7168:RR 256x14336x4096:RR; do
  s=${sl%:*}; l=${sl#*:}
  for cfg in c224 e224 def def e224 c224; do
    case $cfg in c224) K=$C; e=KILN_WGMMA_CFG=n224;; e224) K=$E; e=KILN_WGMMA_CFG=n224;; def) K=$E; e=KILN_NONE=1;; esac
    echo "{\"cfg\":\"$cfg\",\"shape\":\"$s $l\"}" >> $OUT/sweep.jsonl
    timeout 60 env $e $K --no-store --json bench --shape $s --layout $l --reps 20 >> $OUT/sweep.jsonl 2>> $OUT/err.txt
  done
done
sed -n '/^table() {/,/^}/p' scripts/gpu-widths.sh > /tmp/table.sh; source /tmp/table.sh
table $OUT/sweep.jsonl | tee $OUT/sweep.txt
