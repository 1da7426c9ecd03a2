#!/usr/bin/env bash
# GEMM small shapes (issue 3): does a shallower ring (less shared memory per block) help where the
# kernel is latency-bound? KILN_WGMMA_STAGES over the default config and TINY/SMALL, cuBLAS in the
# same process, RC bf16, 30 reps; 4096^3 as a control.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-stages; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; } > $OUT/machine.txt
: > $OUT/sweep.jsonl
for round in 1 2; do
for shape in 512x512x512 1024x1024x1024 2048x2048x2048 128x4096x4096 4096x4096x4096; do
  for cfg in default default,2 default,3 default,4 tiny,3 tiny,4 small,3 small,4; do
    c=${cfg%%,*}; st=${cfg#*,}; [ "$st" = "$cfg" ] && st=""
    env=""; [ "$c" != default ] && env="KILN_WGMMA_CFG=$c"; [ -n "$st" ] && env="$env KILN_WGMMA_STAGES=$st"
    r=$(env $env timeout 60 $B --no-store --json bench --shape $shape --version wgmma_tma_ws --reps 30 --warmup 5 2>>$OUT/sweep.err | tr -d '\n')
    echo "{\"round\":$round,\"shape\":\"$shape\",\"cfg\":\"$cfg\",\"env\":\"$env\",\"r\":${r:-null}}" >> $OUT/sweep.jsonl
  done
done
done
python3 - $OUT <<'PY'
import json,sys,collections,statistics as st
rows=collections.defaultdict(lambda: collections.defaultdict(list))
for l in open(sys.argv[1]+'/sweep.jsonl'):
    d=json.loads(l)
    if not d['r']: continue
    x=d['r'][0] if isinstance(d['r'],list) else d['r']
    v=x['versions'][0]; rows[d['shape']][d['cfg']].append(v[1])
for sh,c in rows.items():
    print(sh, ' '.join(f"{k}:{st.median(v):.3f}" for k,v in c.items()))
PY
