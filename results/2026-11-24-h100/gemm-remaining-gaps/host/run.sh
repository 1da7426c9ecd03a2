#!/usr/bin/env bash
# Session 22 run 3 (main's binary 9c9648d): (a) what CPU the GPU host has, and one variant's
# NVRTC compile alone on it (the same source and options timed on the 2-core CPU box, where it
# takes ~400-450 ms), and `kiln check` of two versions with one compile at a time; (b) issue 3's
# target set with the layouts in the reverse order (CC, RR, CR, RC), against session 21's run 8
# (RC first), to show which lows follow the place in the run (#57, #89).
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/host; mkdir -p $OUT $FINAL
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
K=.carry/probe/kiln; chmod +x $K
H=results/2026-11-24-h100/session22/host
save() { tar czf $FINAL/host.tgz -C /tmp host; }
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; nproc; date -u; echo "binary: $(cat .carry/probe/COMMIT)"; } > $OUT/machine.txt
lscpu > $OUT/lscpu.txt 2>&1; cat /proc/cpuinfo | grep MHz | sort | uniq -c > $OUT/cpu-mhz.txt
L=$(ls /usr/local/cuda/lib64/libnvrtc.so.13 /usr/local/cuda*/targets/x86_64-linux/lib/libnvrtc.so.13 2>/dev/null | head -1)
[ -z "$L" ] && L=$(ldconfig -p | awk '/libnvrtc.so.13 /{print $NF; exit}')
echo "nvrtc: $L" >> $OUT/machine.txt
for i in 1 2 3 4 5 6; do NVRTC_LIB=$L KD=kernels python3 $H/nv.py gemm/wgmma_tma_ws.cu $(cat $H/opts.txt) 2>&1 | grep -E "status|process" | tr '\n' ' ' >> $OUT/nvrtc-alone.txt; echo >> $OUT/nvrtc-alone.txt; done
cat $OUT/nvrtc-alone.txt
for v in wgmma_tma mma_sync; do rm -rf /tmp/kc1; KILN_CACHE_DIR=/tmp/kc1 RAYON_NUM_THREADS=1 timeout 150 $K --no-store check --version $v > $OUT/check1-$v.txt 2>&1; tail -2 $OUT/check1-$v.txt; done
save
timeout 360 $K --no-store --json bench --set targets --layouts CC,RR,CR,RC --reps 30 > $OUT/targets.json 2>>$OUT/err.txt
echo "targets rc $?"
save
sed -n '/^python3 - \$OUT\/targets.json/,/^PY$/p' results/2026-11-23-h100/session15/final/run.sh > /tmp/targets.sh
OUT=$OUT bash /tmp/targets.sh > $OUT/targets.txt; cat $OUT/targets.txt
save
