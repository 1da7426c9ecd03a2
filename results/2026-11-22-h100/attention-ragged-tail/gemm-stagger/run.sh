#!/usr/bin/env bash
# GEMM consumer stagger (ledger #14): consumer 1 starts KILN_WGMMA_STAGGER K blocks behind
# consumer 0 so that the two consumers' tile ends (drain + epilogue) stop coinciding; default
# dispatch otherwise, cuBLAS in the same process, RC bf16, 30 reps, three rounds. A quick verify
# of the staggered kernel first.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-stagger; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; } > $OUT/machine.txt
{ for d in 2 3; do env KILN_WGMMA_STAGGER=$d timeout 200 $B --no-store verify --suite quick --version wgmma_tma_ws; echo "stagger $d verify exit $?"; done; } > $OUT/verify.txt 2>&1
grep exit $OUT/verify.txt
: > $OUT/stagger.jsonl
for round in 1 2 3; do
for shape in 4096x4096x4096 4096x4096x1024 8192x8192x8192 8192x14336x4096 2048x4096x4096; do
  for d in 0 1 2 3; do
    env=""; [ $d -gt 0 ] && env="KILN_WGMMA_STAGGER=$d"
    r=$(env $env timeout 60 $B --no-store --json bench --shape $shape --version wgmma_tma_ws --reps 30 --warmup 5 2>>$OUT/stagger.err | tr -d '\n')
    echo "{\"round\":$round,\"shape\":\"$shape\",\"d\":$d,\"r\":${r:-null}}" >> $OUT/stagger.jsonl
  done
done
done
python3 - $OUT <<'PY'
import json,sys,collections,statistics as st
rows=collections.defaultdict(lambda: collections.defaultdict(list))
for l in open(sys.argv[1]+'/stagger.jsonl'):
    d=json.loads(l)
    if not d['r']: continue
    x=d['r'][0] if isinstance(d['r'],list) else d['r']
    v=x['versions'][0]; rows[d['shape']][d['d']].append((v[0]['tflops'],v[1]))
for sh,c in rows.items():
    print(sh, ' '.join(f"d{k}: {st.median(t for t,_ in v):.1f} TF x{st.median(r for _,r in v):.3f}" for k,v in sorted(c.items())))
PY
