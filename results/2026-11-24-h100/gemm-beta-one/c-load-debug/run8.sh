#!/usr/bin/env bash
# Session 20 run 8: who can issue the C load. Both binaries are c with the epilogue's C loads and
# waits compiled out (results wrong, expected), plus one C load (chunk (0, 0) into the first
# staging buffer, on its barrier) waited for at once:
#   y1: by each consumer warpgroup's leader, right after setmaxnreg.inc;
#   y2: by thread 0 in the block's set-up, before the block's sync (the producer's thread).
# Hangs in y1 and not in y2: a consumer (after setmaxnreg.inc) cannot complete a TMA load here.
# Hangs in both: the barrier or the destination.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/r8; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
D=.carry/s20; chmod +x $D/kiln-y1 $D/kiln-y2
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/machine.txt; date -u >> $OUT/machine.txt
save() { tar czf $FINAL/r8.tgz -C /tmp r8; }
t() {
  local b=$1 name=$2; shift 2; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local t0=$SECONDS
  env "${envs[@]}" timeout 30 $D/kiln-$b --no-store verify --version wgmma_tma_ws "$@" > $OUT/$b-$name.txt 2>&1
  local rc=$?
  echo "$b $name: rc $rc, $((SECONDS - t0)) s: $(grep -E '^\| wgmma_tma_ws ' $OUT/$b-$name.txt | tail -1 | cut -c1-80)" | tee -a $OUT/summary.txt
  save
}
for b in y2 y1; do
  t $b pingpong-f32 X=1 -- --shape 64x64x64 --out f32 --beta 0.5
  t $b large-bf16 KILN_WGMMA_CFG=large KILN_WGMMA_SPLITS=1 -- --shape 64x64x64 --beta 0.5
done
