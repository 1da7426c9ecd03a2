#!/usr/bin/env bash
# GEMM per-warp TMA-store epilogue (ledger #15): each warp stores its own 16 rows of a 64-column
# chunk (a 64 x 16 box), with warp syncs instead of the two warpgroup named barriers per chunk.
# Verify (full suite, wgmma_tma_ws), then head (1fa4aec) / warpepi alternating, cuBLAS in the
# same process, RC bf16, 30 reps, three rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
L=.carry/lead; chmod +x $L/kiln-*
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; } > $OUT/machine.txt
timeout 300 $L/kiln-warpepi --no-store verify --version wgmma_tma_ws > $OUT/verify.txt 2>&1; echo "verify full exit $?"; tail -3 $OUT/verify.txt
: > $OUT/ab.jsonl
for round in 1 2 3; do
for shape in 4096x4096x4096 4096x4096x1024 8192x8192x2048 2048x14336x4096 512x4096x4096 1024x1024x1024 4000x4000x4000; do
  for bin in head warpepi; do
    r=$(timeout 60 $L/kiln-$bin --no-store --json bench --shape $shape --version wgmma_tma_ws --reps 30 --warmup 5 2>>$OUT/ab.err | tr -d '\n')
    echo "{\"round\":$round,\"shape\":\"$shape\",\"bin\":\"$bin\",\"r\":${r:-null}}" >> $OUT/ab.jsonl
  done
done
done
python3 - $OUT <<'PY'
import json,sys,collections,statistics as st
rows=collections.defaultdict(lambda: collections.defaultdict(list))
for l in open(sys.argv[1]+'/ab.jsonl'):
    d=json.loads(l)
    if not d['r']: continue
    x=d['r'][0] if isinstance(d['r'],list) else d['r']
    v=x['versions'][0]; rows[d['shape']][d['bin']].append((v[0]['median_ms'],v[1]))
for sh,c in rows.items():
    h=st.median(t for t,_ in c['head']); w=st.median(t for t,_ in c['warpepi'])
    print(f"{sh}: head {h*1e3:.1f} us x{st.median(r for _,r in c['head']):.3f} | warpepi {w*1e3:.1f} us x{st.median(r for _,r in c['warpepi']):.3f} | time new/old {w/h:.4f}")
PY
