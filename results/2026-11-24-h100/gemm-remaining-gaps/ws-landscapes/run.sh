#!/usr/bin/env bash
# Session 22 run 8 (binary bf7512f, kernels as main's 9c9648d): issue 4's search target on
# today's wgmma_tma_ws space. The committed GEMM landscapes (H200, session 2) are of a 60-config
# space, where 15 % is 9 evaluations and the search reached 2 % of the best in 20-65 % of
# replays. Exhaustive tunes of the current space (BM, BN 64-320, pairs, split-K, tail, stream-K,
# ping-pong) at four shapes, each landscape written for `kiln tune-replay` on the CPU.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/wl; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/wl/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
K=.carry/host/kiln; chmod +x $K
save() { tar czf $FINAL/wl.tgz -C /tmp wl; }
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; nproc; date -u; echo "binary: $(cat .carry/host/COMMIT)"; } > $OUT/machine.txt
for s in 4096x4096x4096 2048x2048x2048 512x4096x14336 128x4096x14336; do
  timeout 140 $K tune --version wgmma_tma_ws --shape $s --search exhaustive --landscape $OUT/ws-$s.json > $OUT/tune-$s.txt 2>&1
  echo "tune $s rc $? $(date -u +%T)"; grep -E "^best|configs|timed" $OUT/tune-$s.txt | head -3
  save
done
rm -f $OUT/kiln.db; save
