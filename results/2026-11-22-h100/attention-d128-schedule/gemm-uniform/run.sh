#!/usr/bin/env bash
# Warp-uniform warpgroup index (descriptors in uniform registers): GEMM and MoE quick verifies
# with the new binary, then old/new alternating against cuBLAS (same process) on nine GEMM
# shapes, and the MoE grouped GEMM on the issue's three shapes.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
N=.carry/lead/kiln-uniform; O=.carry/lead/kiln-final; chmod +x $N $O
timeout 200 $N --no-store verify --suite quick > $OUT/verify-gemm.txt 2>&1; echo "gemm verify exit $?"; tail -1 $OUT/verify-gemm.txt
timeout 150 $N --no-store moe verify --suite quick > $OUT/verify-moe.txt 2>&1; echo "moe verify exit $?"; tail -1 $OUT/verify-moe.txt
: > $OUT/gemm.jsonl
for round in 1 2; do for bin in O N; do B=${!bin}
  for sh in 4096 8192 2048 8192x14336x4096 512x4096x14336 2048x14336x4096 4000 4096x4096x4088 128x4096x14336; do
    r=$(timeout 60 $B --no-store --json bench --shape $sh --version wgmma_tma_ws --reps 15 --warmup 3 2>>$OUT/bench.err | tr -d '\n')
    echo "{\"round\":$round,\"bin\":\"$bin\",\"shape\":\"$sh\",\"rows\":${r:-null}}" >> $OUT/gemm.jsonl
  done; done; done
PREFILL=1512,1091,539,772,779,979,880,964; SMALL1=40,248,112,176,64,200,136,96; SMALL2=40,196,88,152,64,120,180,104
for round in 1 2; do for bin in O N; do B=${!bin}
  for sh in "$PREFILL 3072 4096" "$SMALL1 4096 7168" "$SMALL2 7168 2048"; do set -- $sh
    echo "$round $bin $2x$3 $($B --no-store moe bench --counts $1 --n $2 --k $3 --reps 20 2>&1 | grep '^| grouped' | awk -F'|' '{print $5, $8}')"
  done; done; done | tee $OUT/moe.txt
python3 - $OUT <<'PYEOF'
import json,sys,collections
O=sys.argv[1]
r=collections.defaultdict(list)
for l in open(O+'/gemm.jsonl'):
    d=json.loads(l); x=d['rows']
    if x is None: continue
    if isinstance(x,list): x=x[0]
    r[(d['shape'],d['bin'],'k')].append(x['versions'][0][0]['tflops']); r[(d['shape'],d['bin'],'c')].append(x['vendor']['tflops'])
f=lambda v: sum(v)/len(v) if v else float('nan')
for sh in dict.fromkeys(k[0] for k in r):
    o=r[(sh,'O','k')]; n=r[(sh,'N','k')]; co=r[(sh,'O','c')]; cn=r[(sh,'N','c')]
    print(f"{sh:16} old {f(o):6.1f} (x{f(o)/f(co):.3f})  new {f(n):6.1f} (x{f(n)/f(cn):.3f})  new/old {f(n)/f(o):.3f}  new {[round(x) for x in n]} old {[round(x) for x in o]} cuBLAS {[round(x) for x in co+cn]}")
PYEOF
