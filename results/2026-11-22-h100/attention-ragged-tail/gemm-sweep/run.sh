#!/usr/bin/env bash
# GEMM weak shapes (issue 3): every compiled tile config and split factor of wgmma_tma_ws through
# the env overrides, each against cuBLAS in the same process (RC, bf16), to see whether the
# heuristic or the kernel is what loses there.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-final; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; echo "commit 14394d3"; date -u; } > $OUT/machine.txt
: > $OUT/sweep.jsonl
for shape in 512x512x512 1024x1024x1024 128x4096x4096 128x4096x14336 512x4096x4096 4096x4096x4088 4000x4000x4000; do
  for cfg in default large pair large,p0 small small,s2 small,s4 tiny tiny,s2 tiny,s4 tiny,s8; do
    env=""; c=${cfg%%,*}; s=${cfg#*,}; [ "$s" = "$cfg" ] && s=""
    [ "$c" != default ] && env="KILN_WGMMA_CFG=$c"
    [ "$c" = large ] && env="$env KILN_WGMMA_PAIRS=0"
    case "$s" in s*) env="$env KILN_WGMMA_SPLITS=${s#s}";; p0) env="KILN_WGMMA_PAIRS=0";; esac
    r=$(env $env timeout 60 $B --no-store --json bench --shape $shape --version wgmma_tma_ws --reps 30 --warmup 5 2>>$OUT/sweep.err | tr -d '\n')
    echo "{\"shape\":\"$shape\",\"cfg\":\"$cfg\",\"env\":\"$env\",\"r\":${r:-null}}" >> $OUT/sweep.jsonl
  done
done
python3 - $OUT <<'PY'
import json,sys,collections
rows=collections.defaultdict(dict)
for l in open(sys.argv[1]+'/sweep.jsonl'):
    d=json.loads(l)
    if not d['r']: continue
    x=d['r'][0] if isinstance(d['r'],list) else d['r']
    v=x['versions'][0]; rows[d['shape']][d['cfg']]=(v[0]['tflops'],x['vendor']['tflops'],v[1])
for sh,c in rows.items():
    best=max(c.items(), key=lambda kv: kv[1][2])
    print(sh, ' '.join(f"{k}:{v[2]:.3f}" for k,v in c.items()), '| best', best[0], f"{best[1][0]:.1f}/{best[1][1]:.1f}")
PY
