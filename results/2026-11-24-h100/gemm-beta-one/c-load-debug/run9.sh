#!/usr/bin/env bash
# Session 20 run 9: binary y3 = c (the C-load epilogue as it was, loads and waits) less the
# leader's `cp.async.bulk.wait_group.read 0` before a tile's first two C loads (safe at one tile:
# no stores before them). Run 8 showed a consumer's TMA load of C completes at the kernel's
# start. If y3 passes at one tile, that wait (SASS DEPBAR.LE SB0, 0x0) is what hangs.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/r9; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
D=.carry/s20; chmod +x $D/kiln-y3
save() { tar czf $FINAL/r9.tgz -C /tmp r9; }
t() {
  local b=$1 name=$2; shift 2; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local t0=$SECONDS
  env "${envs[@]}" timeout 30 $D/kiln-$b --no-store verify --version wgmma_tma_ws "$@" > $OUT/$b-$name.txt 2>&1
  local rc=$?
  echo "$b $name: rc $rc, $((SECONDS - t0)) s: $(grep -E '^\| wgmma_tma_ws ' $OUT/$b-$name.txt | tail -1 | cut -c1-80)" | tee -a $OUT/summary.txt
  save
}
t y3 pingpong-f32-one-tile X=1 -- --shape 64x64x64 --out f32 --beta 0.5
t y3 large-bf16-one-tile KILN_WGMMA_CFG=large KILN_WGMMA_SPLITS=1 -- --shape 64x64x64 --beta 0.5
t y3 large-f32-one-tile KILN_WGMMA_CFG=large KILN_WGMMA_SPLITS=1 -- --shape 128x256x64 --out f32 --beta 0.5
t y3 large-f32-many-tiles KILN_WGMMA_CFG=large KILN_WGMMA_SPLITS=1 -- --shape 1000x1504x700 --out f32 --beta 0.5
