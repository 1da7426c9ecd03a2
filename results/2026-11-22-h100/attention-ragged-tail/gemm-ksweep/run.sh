#!/usr/bin/env bash
# Where wgmma_tma_ws loses to cuBLAS at large shapes (issue 3): time against K at fixed M = N
# (4096, 8192) and fit t = fixed + per_k * K for both; the fixed part holds per-tile costs
# (pipeline fill, epilogue, last wave), the slope the mainloop. RC bf16, 30 reps, two rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-final; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "commit e497f5e"; } > $OUT/machine.txt
: > $OUT/ksweep.jsonl
for round in 1 2; do
for mn in 4096 8192; do for k in 1024 2048 4096 8192 16384; do
  r=$(timeout 60 $B --no-store --json bench --shape ${mn}x${mn}x$k --version wgmma_tma_ws --reps 30 --warmup 5 2>>$OUT/ksweep.err | tr -d '\n')
  echo "{\"round\":$round,\"mn\":$mn,\"k\":$k,\"r\":${r:-null}}" >> $OUT/ksweep.jsonl
done; done; done
python3 - $OUT <<'PY'
import json,sys,collections,statistics as st
d=collections.defaultdict(lambda: collections.defaultdict(list))
for l in open(sys.argv[1]+'/ksweep.jsonl'):
    x=json.loads(l)
    if not x['r']: continue
    r=x['r'][0] if isinstance(x['r'],list) else x['r']
    d[(x['mn'],x['k'])]['kiln'].append(r['versions'][0][0]['median_ms']); d[(x['mn'],x['k'])]['cublas'].append(r['vendor']['median_ms'])
for mn in (4096,8192):
    ks=[k for k in (1024,2048,4096,8192,16384) if (mn,k) in d]
    for who in ('kiln','cublas'):
        ts=[st.median(d[(mn,k)][who]) for k in ks]
        n=len(ks); mk=sum(ks)/n; mt=sum(ts)/n
        b=sum((k-mk)*(t-mt) for k,t in zip(ks,ts))/sum((k-mk)**2 for k in ks); a=mt-b*mk
        print(f"M=N={mn} {who}: " + " ".join(f"K{k}:{t*1e3:.1f}us({2*mn*mn*k/t/1e9:.0f}TF)" for k,t in zip(ks,ts)) + f" | fit fixed {a*1e3:.1f} us, per 1024 K {b*1024*1e3:.1f} us")
PY
