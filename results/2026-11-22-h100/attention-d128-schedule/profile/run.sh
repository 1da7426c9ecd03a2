#!/usr/bin/env bash
# Profile (ncu, clocks left alone) fa3_wgmma d128 B2 S8192 vs SDPA cuDNN, and wgmma_tma_ws 4096^3 vs cuBLAS.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=$OUT/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
BIN=.carry/lead/kiln; chmod +x $BIN
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
echo "ncu=$NCU"; $NCU --version | tail -1
$NCU --query-metrics 2>/dev/null | grep -i -E "gmma|tensor_op|pipe_xu|pipe_fma " > $OUT/metrics-list.txt; wc -l $OUT/metrics-list.txt
SECS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section InstructionStats --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section SourceCounters"
# warm the JIT cache first
$BIN --no-store attn bench --batch 2 --heads 16 --seqlen 8192 --dim 128 --version fa3_wgmma --reps 3 --warmup 1 > $OUT/attn-plain.txt 2>&1
timeout 200 $NCU --clock-control none $SECS -k regex:attn_fa3 -s 1 -c 1 -o $OUT/fa3 $BIN --no-store attn bench --batch 2 --heads 16 --seqlen 8192 --dim 128 --version fa3_wgmma --reps 2 --warmup 1 > $OUT/ncu-fa3.log 2>&1; echo "fa3 rc $?"
cat > /tmp/sdpa.py <<'PYEOF'
import torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
q,k,v=(torch.randn(2,8192,16,128,device='cuda',dtype=torch.bfloat16).transpose(1,2) for _ in range(3))
with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
    for _ in range(3): F.scaled_dot_product_attention(q,k,v)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    F.scaled_dot_product_attention(q,k,v)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
PYEOF
timeout 200 $NCU --clock-control none --profile-from-start off $SECS -o $OUT/cudnn $PY /tmp/sdpa.py > $OUT/ncu-cudnn.log 2>&1; echo "cudnn rc $?"
$BIN --no-store bench --shape 4096 --version wgmma_tma_ws --reps 3 --warmup 1 > $OUT/gemm-plain.txt 2>&1
timeout 200 $NCU --clock-control none $SECS -k regex:"gemm|sm90|nvjet|xmma|cutlass" -s 2 -c 4 -o $OUT/gemm $BIN --no-store bench --shape 4096 --version wgmma_tma_ws --reps 2 --warmup 1 > $OUT/ncu-gemm.log 2>&1; echo "gemm rc $?"
for r in fa3 cudnn gemm; do
  [ -f $OUT/$r.ncu-rep ] || continue
  $NCU -i $OUT/$r.ncu-rep --page details --csv > $OUT/$r-details.csv 2>&1
  $NCU -i $OUT/$r.ncu-rep --page source --csv --print-source sass > $OUT/$r-source.csv 2>&1 || $NCU -i $OUT/$r.ncu-rep --page source --csv > $OUT/$r-source.csv 2>&1
  ls -la $OUT/$r-*.csv
  grep -E '"(Duration|SM Frequency|Compute \(SM\) Throughput|Issue Slots Busy|Executed Ipc Active|Registers Per Thread|No Eligible|Active Warps Per Scheduler|Eligible Warps Per Scheduler)"' $OUT/$r-details.csv | cut -d, -f5,12- | head -40
done
cat $OUT/attn-plain.txt | tail -4; tail -4 $OUT/gemm-plain.txt
