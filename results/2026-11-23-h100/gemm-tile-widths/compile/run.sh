#!/usr/bin/env bash
# Session 17 run 8: issue 4's compile figures on the GPU host with the session's final binary
# (f): `kiln check` of the whole registry from an empty JIT cache (cold: median wall and CPU per
# variant, 16 compiles in parallel), then again from the filled cache (warm start).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit-cold
K=.carry/s17/kiln-f; chmod +x $K
{ nvidia-smi --query-gpu=name --format=csv; nproc; date -u; echo "binary: f (session 17 final)"; } > $OUT/machine.txt
rm -rf $KILN_CACHE_DIR
timeout 170 $K --no-store check > $OUT/cold.txt 2>&1; echo "cold rc $?"; tail -3 $OUT/cold.txt
timeout 60 $K --no-store check > $OUT/warm.txt 2>&1; echo "warm rc $?"; tail -3 $OUT/warm.txt
