#!/usr/bin/env bash
# Session 22 run 5: run 4's nvctx.py compiles were NVRTC cache hits (49-57 ms: NVRTC 12.9+ keeps
# programs in the driver's compute cache unless given --no-cache, which kiln passes). Again with
# --no-cache: is a real compile slower in a process with the CUDA driver up? And `kiln check`
# as is against CUDA_VISIBLE_DEVICES="" (no cuInit in kiln's process) for one version one compile
# at a time, and for all of wgmma_tma_ws 16 at a time. Plus the driver and UVM/HMM settings.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/ctx2; mkdir -p $OUT $FINAL
K=.carry/probe/kiln; chmod +x $K
H=results/2026-11-24-h100/session22/host; D=results/2026-11-24-h100/session22/nvrtc-ctx
save() { tar czf $FINAL/ctx2.tgz -C /tmp ctx2; }
export NVRTC_LIB=/usr/local/cuda-13.0/targets/x86_64-linux/lib/libnvrtc.so.13
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,driver_version --format=csv; nproc; date -u; echo "binary: $(cat .carry/probe/COMMIT)"; } > $OUT/machine.txt
{ nvidia-smi -q | grep -i -E "addressing|hmm|persistence"; for f in /sys/module/nvidia_uvm/parameters/*; do echo "$f $(cat $f 2>/dev/null)"; done; uname -r; cat /sys/kernel/mm/transparent_hugepage/enabled; } > $OUT/driver.txt 2>&1
for r in 1 2; do for m in none ctx init init ctx none; do
  KD=kernels python3 $D/nvctx.py $m 3 gemm/wgmma_tma_ws.cu $(cat $H/opts.txt) --no-cache 2>&1 | grep status >> $OUT/nvctx.txt
done; done
python3 - $OUT/nvctx.txt <<'PY' | tee $OUT/summary.txt
import sys, collections, statistics as st
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    w = l.split(); d[w[0]].append((float(w[5]), float(w[8])))
for m, v in d.items():
    print(f"{m:5s} n={len(v)} wall median {st.median(x for x, _ in v):.0f} ms, cpu median {st.median(y for _, y in v):.0f} ms  all: {[int(x) for x, _ in v]}")
PY
save
for v in gpu none none gpu; do
  rm -rf /tmp/kc1; e=""; [ $v = none ] && e="CUDA_VISIBLE_DEVICES="
  env $e KILN_CACHE_DIR=/tmp/kc1 KILN_STORE=/tmp/k.db RAYON_NUM_THREADS=1 timeout 100 $K --no-store check --version wgmma_tma > $OUT/check1-$v.txt 2>&1
  echo "[1 thread, $v] $(tail -1 $OUT/check1-$v.txt)" | tee -a $OUT/check.txt
done
save
for v in gpu none; do
  rm -rf /tmp/kc1; e=""; [ $v = none ] && e="CUDA_VISIBLE_DEVICES="
  env $e KILN_CACHE_DIR=/tmp/kc1 KILN_STORE=/tmp/k.db timeout 200 $K --no-store check --version wgmma_tma_ws > $OUT/check16-$v.txt 2>&1
  echo "[16 threads, $v] $(tail -1 $OUT/check16-$v.txt)" | tee -a $OUT/check.txt
  save
done
