#!/usr/bin/env bash
# Session 23 run 5 (binary 97f9b4a, .carry/lean): issue 4's search target where the heuristic
# may not be the best config. Session 22's four landscapes of today's space all had the
# heuristic's config as the exhaustive best; these shapes are where kiln trails cuBLAS or the
# heuristic's rules are least sure (rows off 128-byte lines, a tail split, one wave of 128-wide
# tiles). Exhaustive tunes, landscapes written for `kiln tune-replay` on the CPU.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/wl; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/wl/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
K=.carry/lean/kiln; chmod +x $K
save() { tar czf $FINAL/wl.tgz -C /tmp wl; }
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; nproc; date -u; echo "binary: $(cat .carry/lean/COMMIT)"; } > $OUT/machine.txt
for s in 4000x4000x4000 512x4096x4096 3000x3000x3000 8192x14336x4096 1024x1024x1024 16384x16384x16384; do
  timeout 150 $K tune --version wgmma_tma_ws --shape $s --search exhaustive --landscape $OUT/ws-$s.json > $OUT/tune-$s.txt 2>&1
  echo "tune $s rc $? $(date -u +%T)"; grep -E "^best|candidates of|^compile" $OUT/tune-$s.txt | head -3
  save
done
rm -f $OUT/kiln.db; save
