#!/usr/bin/env bash
# Session 21 run 4: the 64 forced C-load checks of run 1, on g (0ab046e, main's code at the
# session's end). Run 1 ran them on h, whose split tiles take g's path but whose whole tiles
# do not.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/r4; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
D=.carry/check; S=$D/kiln; chmod +x $S
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: g = $(cat $D/COMMIT)"; } > $OUT/machine.txt
save() { tar czf $FINAL/r4.tgz -C /tmp r4; }
n=0; fails=0
v() {
  local name=$1; shift; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  n=$((n+1))
  env "${envs[@]}" timeout 20 $S --no-store verify --version wgmma_tma_ws "$@" >> $OUT/verify.txt 2>&1
  local rc=$?
  if [ $rc != 0 ]; then fails=$((fails+1)); echo "FAIL rc $rc: $name $*" | tee -a $OUT/fails.txt; fi
}
t0=$SECONDS
for l in RC CC; do
  for o in f32 bf16; do
    for c in large medium pair medium-pair wide n168 n224 small tiny tiny64 pingpong pingpong64 pingpong-tiny; do
      v "$c $l $o" KILN_WGMMA_CFG=$c KILN_WGMMA_SPLITS=1 -- --shape 1000x1504x700 --layout $l --out $o --alpha 0.75 --beta 0.5
    done
    v "large split 3 $l $o" KILN_WGMMA_CFG=large KILN_WGMMA_SPLITS=3 KILN_WGMMA_TAIL=0 -- --shape 600x1344x640 --layout $l --out $o --beta -1.5
    v "large stream-K $l $o" KILN_WGMMA_CFG=large KILN_WGMMA_SK=1 KILN_WGMMA_GRID=4 -- --shape 1000x1504x700 --layout $l --out $o --beta 2
    v "pingpong grid 4 $l $o" KILN_WGMMA_CFG=pingpong KILN_WGMMA_GRID=4 -- --shape 1000x1504x700 --layout $l --out $o --beta 0.5
    if [ $fails -gt 3 ]; then break 2; fi
  done
done
echo "forced C-load checks ($((SECONDS - t0)) s): $n run, $fails failed" | tee $OUT/summary.txt
save
