#!/usr/bin/env bash
# Session 7, issue 7: the fused SwiGLU's last-wave split (prefill: 1512 tiles on 132 SMs leave 60
# in a 12th wave, now cut into 2 K slices each). (1) MoE full verify suite, default grid and with
# the grid capped at 8 and 13 CTAs (KILN_SWIGLU_GRID: small problems then have a sparse last wave
# to split); (2) prefill FFN, old binary (4cf8334) vs new vs new with the split off
# (KILN_SWIGLU_TAIL=0), three rotated rounds; (3) scripts/gpu-moe.sh (torch peer, no tile sweep).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
OLD=.carry/lead/kiln-s7e; NEW=.carry/lead/kiln-s7f; chmod +x $OLD $NEW
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "old 4cf8334, new = working tree (swiglu tail split)"; } > $OUT/machine.txt
for g in default 8 13; do
  if [ $g = default ]; then E=""; else E="KILN_SWIGLU_GRID=$g"; fi
  env $E timeout 300 $NEW --no-store moe verify --suite full --version swiglu_dual > $OUT/verify-grid-$g.txt 2>&1; echo "verify swiglu full grid $g exit $?" | tee -a $OUT/verify.txt
  tail -3 $OUT/verify-grid-$g.txt >> $OUT/verify.txt
done
timeout 300 $NEW --no-store moe verify --suite full > $OUT/verify-all.txt 2>&1; echo "verify all full exit $?" | tee -a $OUT/verify.txt
tail -6 $OUT/verify-all.txt >> $OUT/verify.txt
PREFILL=1512,1091,539,772,779,979,880,964
: > $OUT/ab.txt
V="old new new-notail"
for round in 1 2 3; do
  for v in $V; do
    case $v in old) B=$OLD; E="";; new) B=$NEW; E="";; new-notail) B=$NEW; E="KILN_SWIGLU_TAIL=0";; esac
    echo "== $v round $round" >> $OUT/ab.txt
    env $E $B --no-store moe bench --counts $PREFILL --n 3072 --k 4096 --swiglu --reps 50 --warmup-ms 300 >> $OUT/ab.txt 2>&1
  done
  set -- $V; V="$2 $3 $1"
done
grep -E "^==|fused|gate|SwiGLU|swiglu" $OUT/ab.txt | head -60
MOE_SWEEP=0 KILN_BIN=$NEW OUT=$OUT/moe bash scripts/gpu-moe.sh > $OUT/gpu-moe.txt 2>&1; echo "gpu-moe exit $?"
tail -15 $OUT/gpu-moe.txt
