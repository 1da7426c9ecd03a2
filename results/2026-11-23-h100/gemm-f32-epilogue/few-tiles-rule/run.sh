#!/usr/bin/env bash
# Session 19 run 1. (1) A/B of the few-tile rule (ledger #79): binary m (main 8244264) against
# p (m + the rule), default dispatch, rotated m p p m, at held-out shapes with 16-byte rows, the
# #78 shapes it was fitted on, and two controls it leaves alone. (2) Probe: few tiles and long K
# where rows are on lines or 32/64-byte aligned, forced configs against the default (binary p;
# the rule does not apply there), rotated a..z z..a.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/r1; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
D=.carry/s19; chmod +x $D/kiln-m $D/kiln-p
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binaries: m = $(cat $D/COMMIT-m); p = $(cat $D/COMMIT-p)"; } > $OUT/machine.txt
sed -n '/^table() {/,/^}/p' scripts/gpu-widths.sh > /tmp/table.sh; source /tmp/table.sh
t0=$SECONDS
: > $OUT/ab.jsonl
for sl in 1000x1000x6008:RC 888x1000x5000:CR 1400x600x4008:RC 1000x2000x5000:RR 1240x1240x4008:CC 2000x500x8008:RC 800x800x12008:RC 1000x1000x16008:RC 1000x1000x4008:RC 1000x1000x8000:CR 760x1000x4008:RC 520x1000x4000:CR 1000x1000x3000:RC; do
  s=${sl%:*}; l=${sl#*:}
  for b in m p p m; do
    echo "{\"cfg\":\"$b\",\"shape\":\"$s $l\"}" >> $OUT/ab.jsonl
    timeout 60 $D/kiln-$b --no-store --json bench --shape $s --layout $l --reps 20 >> $OUT/ab.jsonl 2>> $OUT/err.txt
  done
done
echo "A/B: $((SECONDS - t0)) s"
table $OUT/ab.jsonl | tee $OUT/ab.txt
t0=$SECONDS
: > $OUT/probe.jsonl
cfgs="default small:s2 small:s3 large:s4 medium:s2 medium:s3 pair:s2 pair:s4 medium-pair:s2 medium-pair:s3"
for sl in 1024x1024x4096:RC 1000x1000x4032:RC 1024x1024x8192:RC 768x1024x8192:CR 1024x2048x4096:RR 1000x1000x4000:RC; do
  s=${sl%:*}; l=${sl#*:}
  [ $((SECONDS - t0)) -gt 330 ] && { echo "probe: out of time at $s"; break; }
  for cfg in $cfgs $(printf '%s\n' $cfgs | tac); do
    c=${cfg%%:*}; x=${cfg#*:}; [ "$x" = "$cfg" ] && x=""
    E2=""; [ $c != default ] && E2="KILN_WGMMA_CFG=$c"
    case $x in s2) E2="$E2 KILN_WGMMA_SPLITS=2 KILN_WGMMA_TAIL=0";; s3) E2="$E2 KILN_WGMMA_SPLITS=3 KILN_WGMMA_TAIL=0";; s4) E2="$E2 KILN_WGMMA_SPLITS=4 KILN_WGMMA_TAIL=0";; esac
    echo "{\"cfg\":\"$cfg\",\"shape\":\"$s $l\"}" >> $OUT/probe.jsonl
    timeout 60 env $E2 $D/kiln-p --no-store --json bench --shape $s --layout $l --reps 20 >> $OUT/probe.jsonl 2>> $OUT/err.txt
  done
done
echo "probe: $((SECONDS - t0)) s"
table $OUT/probe.jsonl | tee $OUT/probe.txt
for sl in 1024x1024x4096:RC 1000x1000x4032:RC 1024x1024x8192:RC 768x1024x8192:CR 1024x2048x4096:RR 1000x1000x4000:RC; do
  echo "== ${sl%:*} ${sl#*:}: $($D/kiln-p plan --shape ${sl%:*} --layout ${sl#*:} | grep -E '^runs:')"; done | tee $OUT/plans.txt
tar czf $FINAL/r1.tgz -C /tmp r1
