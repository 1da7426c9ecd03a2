#!/usr/bin/env bash
# Session 20 run 10: binary z = c with the leader's `cp.async.bulk.wait_group.read 0` before a
# tile's first two C loads kept only once the consumer has issued stores (epi_chunks > 0), so
# the first tile's loads go without it (run 9: without it, the C-load epilogue passes). Every
# config forced at beta 0.5 in four layouts (f32 and bf16), split, stream-K, the full suite,
# each under a short timeout: does the wait after stores hang too?
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/r10; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
D=.carry/s20; S=$D/kiln-z; chmod +x $S
save() { tar czf $FINAL/r10.tgz -C /tmp r10; }
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
  done
done
echo "forced C-load checks ($((SECONDS - t0)) s): $n run, $fails failed"
save
t0=$SECONDS
timeout 150 $S --no-store verify --version wgmma_tma_ws --suite full > $OUT/verify-full.txt 2>&1
echo "full suite rc $? ($((SECONDS - t0)) s): $(grep -E '^\| wgmma_tma_ws ' $OUT/verify-full.txt | tail -1)"
save
