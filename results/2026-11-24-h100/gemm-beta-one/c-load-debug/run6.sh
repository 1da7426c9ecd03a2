#!/usr/bin/env bash
# Session 20 run 6: binary x3 = c with each C load reading A's first box through A's map instead
# (8 KB at 64x64x64 RC, as a C chunk): does a C-load kernel finish when its loads use a map
# the producer loads through (wrong results expected)? If so, the C map is what hangs.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/r6; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
D=.carry/s20; S=$D/kiln-x3; chmod +x $S
save() { tar czf $FINAL/r6.tgz -C /tmp r6; }
t() {
  local name=$1 to=$2; shift 2; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local t0=$SECONDS
  env "${envs[@]}" timeout $to $S --no-store verify --version wgmma_tma_ws "$@" > $OUT/$name.txt 2>&1
  local rc=$?
  echo "$name: rc $rc, $((SECONDS - t0)) s: $(grep -E '^\| wgmma_tma_ws ' $OUT/$name.txt | tail -1)" | tee -a $OUT/summary.txt
  save
}
t x3-cload-f32-small 30 X=1 -- --shape 64x64x64 --out f32 --beta 0.5
t x3-cload-bf16-large 30 KILN_WGMMA_CFG=large KILN_WGMMA_SPLITS=1 -- --shape 64x64x64 --beta 0.5
t x3-beta0-bf16 30 X=1 -- --shape 1000x1504x700
tail -5 $OUT/x3-cload-f32-small.txt
