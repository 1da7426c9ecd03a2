#!/usr/bin/env bash
# Session 20 run 5: binary x2 = c with the consumers' wait on the C-load barrier compiled out
# (loads still issued): does the hang go (the loads' barrier never completes) or stay (it is
# elsewhere)? Wrong results are expected where it goes.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/r5; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
D=.carry/s20; S=$D/kiln-x2; chmod +x $S
save() { tar czf $FINAL/r5.tgz -C /tmp r5; }
t() {
  local name=$1 to=$2; shift 2; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local t0=$SECONDS
  env "${envs[@]}" timeout $to $S --no-store verify --version wgmma_tma_ws "$@" > $OUT/$name.txt 2>&1
  local rc=$?
  echo "$name: rc $rc, $((SECONDS - t0)) s: $(grep -E '^\| wgmma_tma_ws ' $OUT/$name.txt | tail -1)" | tee -a $OUT/summary.txt
  save
}
t x2-cload-f32-small 30 X=1 -- --shape 64x64x64 --out f32 --beta 0.5
t x2-cload-bf16-large 30 KILN_WGMMA_CFG=large KILN_WGMMA_SPLITS=1 -- --shape 1000x1504x700 --beta 0.5
t x2-beta0-bf16 30 X=1 -- --shape 1000x1504x700
tail -5 $OUT/x2-cload-f32-small.txt
