#!/usr/bin/env bash
# Session 22 run 4: run 3 timed one wgmma_tma_ws variant's NVRTC compile alone on the GPU host at
# 226-263 ms (the 2-core CPU box: 400-450 ms), while `kiln check` on the same host spends
# 830-840 ms per (lighter) variant. Is NVRTC slower in a process with the CUDA driver up?
# (a) nvctx.py: compiles in one process with no CUDA, after cuInit, after cuInit + a current
# context; (b) `kiln check --version wgmma_tma`, one compile at a time, as is and with no GPU
# visible (CUDA_VISIBLE_DEVICES="": cuInit fails, kiln assumes an H100 as on the CPU box).
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/ctx; mkdir -p $OUT $FINAL
K=.carry/probe/kiln; chmod +x $K
H=results/2026-11-24-h100/session22/host; D=results/2026-11-24-h100/session22/nvrtc-ctx
save() { tar czf $FINAL/ctx.tgz -C /tmp ctx; }
export NVRTC_LIB=/usr/local/cuda-13.0/targets/x86_64-linux/lib/libnvrtc.so.13
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; nproc; date -u; echo "binary: $(cat .carry/probe/COMMIT)"; } > $OUT/machine.txt
for r in 1 2; do for m in none init ctx ctx init none; do
  KD=kernels python3 $D/nvctx.py $m 2 gemm/wgmma_tma_ws.cu $(cat $H/opts.txt) 2>&1 | grep status >> $OUT/nvctx.txt
done; done
save
for v in "" none "" none; do
  rm -rf /tmp/kc1
  if [ "$v" = none ]; then CUDA_VISIBLE_DEVICES="" KILN_CACHE_DIR=/tmp/kc1 KILN_STORE=/tmp/k.db RAYON_NUM_THREADS=1 timeout 100 $K --no-store check --version wgmma_tma > $OUT/check-nogpu.txt 2>&1
  else KILN_CACHE_DIR=/tmp/kc1 KILN_STORE=/tmp/k.db RAYON_NUM_THREADS=1 timeout 100 $K --no-store check --version wgmma_tma > $OUT/check-gpu.txt 2>&1; fi
  echo "[${v:-gpu}] $(tail -1 $OUT/check-$([ "$v" = none ] && echo nogpu || echo gpu).txt)" | tee -a $OUT/check.txt
done
python3 - $OUT/nvctx.txt <<'PY' | tee $OUT/summary.txt
import sys, collections, statistics as st
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    w = l.split(); d[w[0]].append((float(w[5]), float(w[8])))
for m, v in d.items():
    print(f"{m:5s} n={len(v)} wall median {st.median(x for x, _ in v):.0f} ms, cpu median {st.median(y for _, y in v):.0f} ms")
PY
save
