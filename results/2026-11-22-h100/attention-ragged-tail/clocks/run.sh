#!/usr/bin/env bash
# d256's per-launch bimodality (session 5 final2: fastest launches 790-808 TF, medians 705-735 at
# S 8k/16k): SM clock and power sampled every 20 ms while fa3_wgmma d256 runs 60 timed launches,
# at S 16384 (bimodal) and S 4096 (steady), twice each.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-final; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "commit 3378f70"; } > $OUT/machine.txt
$B --no-store attn bench --batch 1 --heads 16 --seqlen 16384 --dim 256 --version fa3_wgmma --reps 3 --warmup 1 > /dev/null 2>&1  # compile
: > $OUT/runs.txt
for rep in 1 2; do for s in "1 16384" "4 4096"; do set -- $s
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv,noheader -lms 20 > $OUT/smi-$2-$rep.csv &
  P=$!; sleep 0.5
  r=$($B --no-store --json attn bench --batch $1 --heads 16 --seqlen $2 --dim 256 --version fa3_wgmma --reps 60 --warmup 5 2>/dev/null | tr -d '\n')
  sleep 0.3; kill $P
  echo "S$2 rep$rep $r" >> $OUT/runs.txt
done; done
python3 - $OUT <<'PY'
import sys,glob,json,re,statistics as st
O=sys.argv[1]
for l in open(O+'/runs.txt'):
    tag,rest=l.split(' ',2)[:2],l.split(' ',2)[2]
    m=re.search(r'\{.*\}',rest); r=json.loads(rest[rest.index('['):]) if '[' in rest else None
    x=r[0] if r else {}
    print(' '.join(tag), f"TF {x.get('tflops',0):.0f} min {x.get('min_ms',0):.3f} med {x.get('median_ms',0):.3f} max {x.get('max_ms',0):.3f} ms")
for f in sorted(glob.glob(O+'/smi-*.csv')):
    rows=[r.split(', ') for r in open(f).read().strip().split('\n') if r]
    clk=[int(r[1].split()[0]) for r in rows if len(r)>3]; pw=[float(r[2].split()[0]) for r in rows if len(r)>3]
    reasons=sorted({r[4] for r in rows if len(r)>4})
    print(f.split('/')[-1], f"samples {len(clk)} clock MHz min {min(clk)} med {st.median(clk)} max {max(clk)} | power W min {min(pw):.0f} med {st.median(pw):.0f} max {max(pw):.0f} | reasons {reasons}")
PY
