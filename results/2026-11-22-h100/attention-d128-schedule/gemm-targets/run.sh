#!/usr/bin/env bash
# GEMM target set (issue 3), RC, wgmma_tma_ws against cuBLAS in the same process, HEAD binary.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-head; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; } > $OUT/machine.txt
timeout 400 $B --json bench --set targets --layouts RC --version wgmma_tma_ws > $OUT/gemm-targets-rc.json 2> $OUT/gemm-targets-rc.err
tail -4 $OUT/gemm-targets-rc.err
python3 - $OUT <<'PY'
import json,sys,math
d=json.load(open(sys.argv[1]+'/gemm-targets-rc.json'))
rs=[]
for x in d:
    p=x['problem']; k=x['versions'][0][0]; r=x['versions'][0][1]; rs.append(r)
    print(f"{p['m']}x{p['n']}x{p['k']:<6} {k['tflops']:7.1f} {x['vendor']['tflops']:7.1f} {r:.3f}")
print('geomean', math.exp(sum(map(math.log,rs))/len(rs)), 'min', min(rs))
PY
