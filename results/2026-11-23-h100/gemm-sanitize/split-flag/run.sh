#!/usr/bin/env bash
# Session 18 run 4: the split-K arrival's "last" flag through bar.red.or instead of a shared word
# (binary o; n = before). Full GEMM suite and the MoE quick suite on o, `kiln sanitize --configs`
# on o (all four tools), then n against o at split and last-wave-split shapes, rotated n o o n.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/sf; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
N=.carry/s18/kiln-n; O=.carry/s18/kiln-o; chmod +x $N $O
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binaries: n = d1f96d5 + sanitize --configs; o = n + split flag via bar.red.or"; } > $OUT/machine.txt
t0=$SECONDS
timeout 240 $O --no-store verify --version wgmma_tma_ws --suite full > $OUT/verify-full.txt 2>&1
echo "full suite rc $? in $((SECONDS - t0)) s: $(grep -E '^\| wgmma_tma_ws ' $OUT/verify-full.txt | tail -1)"
t0=$SECONDS
timeout 150 $O --no-store moe verify --suite quick > $OUT/moe-verify.txt 2>&1
echo "moe quick rc $? in $((SECONDS - t0)) s:"; tail -8 $OUT/moe-verify.txt
t0=$SECONDS
timeout 300 $O --no-store sanitize --configs --jobs 8 --timeout 120 > $OUT/sanitize-configs.txt 2>&1
echo "sanitize --configs rc $? in $((SECONDS - t0)) s: $(tail -1 $OUT/sanitize-configs.txt)"
grep -E "errors|FAILED|TIMED|NOT COVERED" $OUT/sanitize-configs.txt | head -20
: > $OUT/ab.jsonl
for sl in 128x8192x28672:RC 5000x5000x5000:RC 6000x3000x3000:RC 2048x2048x8192:RC 4096x4096x4096:RC; do
  s=${sl%:*}; l=${sl#*:}
  E=""; [ $s = 2048x2048x8192 ] && E="KILN_WGMMA_CFG=large KILN_WGMMA_SPLITS=3 KILN_WGMMA_TAIL=0"
  for b in n o o n; do
    B=$N; [ $b = o ] && B=$O
    echo "{\"cfg\":\"$b\",\"shape\":\"$s $l\"}" >> $OUT/ab.jsonl
    timeout 60 env $E $B --no-store --json bench --shape $s --layout $l --reps 20 >> $OUT/ab.jsonl 2>> $OUT/err.txt
  done
done
sed -n '/^table() {/,/^}/p' scripts/gpu-widths.sh > /tmp/table.sh; source /tmp/table.sh
table $OUT/ab.jsonl | tee $OUT/ab.txt
tar czf $FINAL/split-flag.tgz -C /tmp sf
