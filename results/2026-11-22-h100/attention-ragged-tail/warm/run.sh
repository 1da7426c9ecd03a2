#!/usr/bin/env bash
# Is d256's per-launch bimodality the power controller's transient at load onset? fa3_wgmma d256
# B1 S16384 and B2 S8192 with 5 warm-up launches (the bench default used so far) against 200
# (over a second of load), alternating, three times; SM clock sampled during each.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-final; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "commit 3378f70"; } > $OUT/machine.txt
$B --no-store attn bench --batch 1 --heads 16 --seqlen 16384 --dim 256 --version fa3_wgmma --reps 3 --warmup 1 > /dev/null 2>&1
: > $OUT/runs.txt
for rep in 1 2 3; do for s in "1 16384" "2 8192"; do set -- $s; for w in 5 200; do
  r=$($B --no-store --json attn bench --batch $1 --heads 16 --seqlen $2 --dim 256 --version fa3_wgmma --reps 30 --warmup $w 2>/dev/null | tr -d '\n')
  echo "S$2 warmup$w rep$rep ${r:-null}" >> $OUT/runs.txt
done; done; done
python3 - $OUT <<'PY'
import sys,json,collections,statistics as st
res=collections.defaultdict(list)
for l in open(sys.argv[1]+'/runs.txt'):
    a,b,c,rest=l.split(' ',3); x=json.loads(rest)[0]
    res[(a,b)].append((x['tflops'],x['min_ms'],x['median_ms'],x['max_ms']))
for k,v in sorted(res.items()):
    print(k, ' | '.join(f"{t:.0f} TF (min {mn:.2f} med {md:.2f} max {mx:.2f})" for t,mn,md,mx in v))
PY
