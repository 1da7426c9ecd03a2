#!/usr/bin/env bash
# Issue 4, attention target: exhaustive fa3_wgmma landscapes on the GPU (every candidate guarded,
# verified at a small problem of its class, then timed, in the watched worker), exported as
# landscape JSON for `kiln tune-replay` on the CPU; then the default dispatch reading the cache.
# LANDS overrides the list ("B S D causal|plain" items); every command is bounded so that the
# whole script ends within BUDGET seconds.
set -uo pipefail
B=.carry/tuner/kiln; chmod +x $B
export KILN_STORE=$OUT/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
BUDGET=${BUDGET:-275}
T0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
R=$OUT/tune-attn; mkdir -p $R
{ echo "date: $(date -u)"; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader;
  echo "nproc: $(nproc)"; echo "kiln commit: $(cat .carry/tuner/COMMIT 2>/dev/null)"; } | tee $R/device.txt
LANDS=${LANDS:-"4 4096 128 plain;4 4096 128 causal;2 8192 128 plain;2 8192 128 causal;4 4096 64 plain;4 4096 64 causal"}
IFS=';' read -ra ITEMS <<< "$LANDS"
for it in "${ITEMS[@]}"; do
  set -- $it; b=$1; s=$2; d=$3; m=$4
  c=""; [ "$m" = causal ] && c="--causal"
  tag="d$d-b$b-s$s-$m"
  L=$(left); if [ "$L" -lt 25 ]; then echo "skip $tag: $L s left" | tee -a $R/skipped.txt; continue; fi
  cmd="$B tune attn --batch $b --heads 16 --seqlen $s --dim $d $c --search exhaustive --timeout-floor 3 --top 15 --landscape $R/landscape-$tag.json"
  echo "$cmd" > $R/tune-$tag.txt
  S=$(date +%s.%N)
  timeout -k 5 $((L - 15)) $cmd >> $R/tune-$tag.txt 2> $R/tune-$tag.err
  echo "rc $? wall $(awk -v a=$S -v b=$(date +%s.%N) 'BEGIN{print b-a}') s" >> $R/tune-$tag.txt
  tail -8 $R/tune-$tag.txt
done
# The default dispatch reads the cache: the same problem with and without it (and the env override
# taking precedence over both).
if [ "$(left)" -gt 12 ]; then
  for env in "" "KILN_NO_TUNED=1" "KILN_FA3_D128=bn=128,stages=3"; do
    echo "== $env" >> $R/dispatch.txt
    env $env timeout 20 $B --no-store attn bench --version fa3_wgmma --batch 4 --heads 16 --seqlen 4096 --dim 128 --reps 20 >> $R/dispatch.txt 2>&1
  done
  cat $R/dispatch.txt
fi
sqlite3 $KILN_STORE "select * from tuning_cache" > $R/cache.txt 2>/dev/null || true
cp $KILN_STORE $R/ 2>/dev/null
tar czf $OUT/tune-attn.tgz -C $OUT tune-attn && rm -rf $R
echo "total $(( $(date +%s) - T0 )) s"
