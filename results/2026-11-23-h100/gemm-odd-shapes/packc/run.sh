#!/usr/bin/env bash
# Session 13 run 12 (run again as run 13 with N=kiln-packc2: C through scratch by the register
# epilogue, only from 2^19 elements; first run's initcheck flagged the copy-back's reads of TMA stores): the copies through 128-byte rows by a kernel of kiln's own (pack_rows.cu)
# instead of cuMemcpy2DAsync (odd-c/: 9 us for 2 x 2 MB at 1024x1024x1023), and C written
# through such a copy when its rows are off 16 bytes (1023x1023x1024: +6.5 us of scalar
# stores; 4096x4095x4096: 286 us against 173). New = 2e31975 + both. Verified: full suite,
# C-path shapes with beta != 0, f32 C and padded odd ldc; sanitize; then old vs new, 2 rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
O=.carry/s13/kiln-2e31975; N=.carry/s13/kiln-packc2; chmod +x $O $N
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "old: 2e31975; new: + pack_rows kernel, C through scratch"; } > $OUT/machine.txt
v() { local tag=$1; shift; echo "== $tag" >> $OUT/verify.txt; timeout 400 $N --no-store verify --version wgmma_tma_ws "$@" >> $OUT/verify.txt 2>&1; local rc=$?; echo "verify $tag rc $rc: $(grep wgmma_tma_ws $OUT/verify.txt | tail -1)"; [ $rc -eq 0 ] || { echo STOP; tail -30 $OUT/verify.txt; exit 1; }; }
v full --suite full
v c-odd --shape 1023x1023x1024
v c-odd-beta --shape 1023x1023x1024 --beta 0.5 --alpha 0.75
v c-odd-f32 --shape 1023x1023x1024 --out f32 --beta -1 --alpha -0.5
v c-ldc-odd --shape 256x200x128 --ldc 201 --beta 0.25
v c-ldc-odd-f16 --shape 256x200x128 --ldc 203 --dtype f16
v all-odd-cc --shape 777x1234x999 --layout CC --beta 1 --out f32
v all-odd-rr --shape 1023x1023x1023 --layout RR
timeout 280 $N --no-store sanitize --version wgmma_tma_ws --timeout 120 > $OUT/sanitize.txt 2>&1; echo "sanitize rc $?"; tail -3 $OUT/sanitize.txt
# the copies' paths (operands and C through scratch) under two tools
for t in initcheck memcheck; do
  timeout 200 /usr/local/cuda/bin/compute-sanitizer --tool $t --error-exitcode 9 $N --no-store verify --version wgmma_tma_ws --shape 1023x1023x1000 --layout CR >> $OUT/sanitize.txt 2>&1; echo "$t 1023x1023x1000 rc $?"
done
: > $OUT/ab.jsonl
CASES="1023x1023x1023:RC 1023x1023x1024:RC 1024x1024x1023:RC 4095x4095x4095:RC 4096x4095x4096:RC 4096x4096x4095:RC 128x4096x4095:RC 500x500x500:RC 100x100x100:RC 777x1234x999:RC"
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
python3 .carry/s13/parse_ab.py $OUT/ab.jsonl | tee $OUT/summary.txt
