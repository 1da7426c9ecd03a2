#!/usr/bin/env bash
# Session 20 run 4: run 3 (c-load/) timed out: the full suite ran past 200 s and every forced f32
# C-load check ran past 60 s (hangs), and its outputs were lost (tarred only at the end). Small
# cases of binary c (ebac6a2), each under a short timeout, outputs kept after each step: which
# epilogue hangs, and what compute-sanitizer says about it.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/r4; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
D=.carry/s20; S=$D/kiln-c; chmod +x $S
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: c = $(cat $D/COMMIT-c)"; } > $OUT/machine.txt
save() { tar czf $FINAL/r4.tgz -C /tmp r4; }
t() { # name, timeout, env..., -- args
  local name=$1 to=$2; shift 2; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local t0=$SECONDS
  env "${envs[@]}" timeout $to $S --no-store verify --version wgmma_tma_ws "$@" > $OUT/$name.txt 2>&1
  local rc=$?
  echo "$name: rc $rc, $((SECONDS - t0)) s: $(grep -E '^\| wgmma_tma_ws ' $OUT/$name.txt | tail -1)" | tee -a $OUT/summary.txt
  save
}
t beta0-f32 30 X=1 -- --shape 1000x1504x700 --out f32
t beta1-f32 30 X=1 -- --shape 1000x1504x700 --out f32 --beta 1
t cload-f32-large-small 30 KILN_WGMMA_CFG=large KILN_WGMMA_SPLITS=1 -- --shape 64x64x64 --out f32 --beta 0.5
t cload-bf16-large-small 30 KILN_WGMMA_CFG=large KILN_WGMMA_SPLITS=1 -- --shape 64x64x64 --beta 0.5
t cload-bf16-pingpong 30 KILN_WGMMA_CFG=pingpong -- --shape 1000x1504x700 --beta 0.5
t cload-bf16-tiny64 30 KILN_WGMMA_CFG=tiny64 -- --shape 1000x1504x700 --beta 0.5
t cload-beta1-bf16 30 KILN_WGMMA_CLOAD=1 -- --shape 1000x1504x700 --beta 1
$S plan --shape 64x64x64 --out f32 --beta 0.5 > $OUT/plan-small.txt 2>&1
t0=$SECONDS
KILN_WGMMA_CFG=large KILN_WGMMA_SPLITS=1 timeout 120 /usr/local/cuda/bin/compute-sanitizer --tool memcheck $S --no-store verify --version wgmma_tma_ws --shape 64x64x64 --out f32 --beta 0.5 > $OUT/memcheck-small.txt 2>&1
echo "memcheck small: rc $?, $((SECONDS - t0)) s" | tee -a $OUT/summary.txt
grep -m5 -E "Invalid|ERROR|error" $OUT/memcheck-small.txt
save
