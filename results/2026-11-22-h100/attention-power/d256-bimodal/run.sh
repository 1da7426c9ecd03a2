#!/usr/bin/env bash
# d256 B2 S8192 stays bimodal under sustained load (session6/tmao/: min 3.12 ms, median 3.42)
# while B1 S16384, the same 2048 items, runs steady at the fast rate. Every launch's time (60
# after 1000 ms of warm-up) with SM clock and power sampled every 20 ms, for: B2 H16 S8192
# (default, the static order, two rounds), B1 H32 S8192 (same items, one batch), B1 H16 S16384,
# B2 H16 S8192 BHSD, and d128 B2 S8192 for reference.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-times; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv; date -u; cat .carry/lead/commit-times; } > $OUT/machine.txt
$B --no-store attn bench --batch 2 --heads 16 --seqlen 8192 --dim 256 --version fa3_wgmma --reps 2 --warmup 1 >/dev/null 2>&1
KILN_FA3_D256=dynamic=0 $B --no-store attn bench --batch 2 --heads 16 --seqlen 8192 --dim 256 --version fa3_wgmma --reps 2 --warmup 1 >/dev/null 2>&1
: > $OUT/runs.jsonl
one() {  # tag env args...
  local tag=$1 e=$2; shift 2
  stdbuf -oL nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw.instant,temperature.gpu,clocks_event_reasons.active --format=csv,noheader -lms 20 > $OUT/smi-$tag.csv 2>/dev/null &
  local P=$!
  local r; r=$(env KILN_FA3_D256="$e" $B --no-store --json attn bench --version fa3_wgmma --reps 60 --warmup-ms 1000 "$@" 2>>$OUT/err.txt | tr -d '\n')
  sleep 0.2; kill -INT $P; wait $P 2>/dev/null
  echo "{\"tag\":\"$tag\",\"r\":${r:-null}}" >> $OUT/runs.jsonl
}
one s8k-a "" --batch 2 --heads 16 --seqlen 8192 --dim 256
one s8k-static "dynamic=0" --batch 2 --heads 16 --seqlen 8192 --dim 256
one b1h32-s8k "" --batch 1 --heads 32 --seqlen 8192 --dim 256
one s16k "" --batch 1 --heads 16 --seqlen 16384 --dim 256
one s8k-bhsd "" --batch 2 --heads 16 --seqlen 8192 --dim 256 --layout bhsd
one s8k-b "" --batch 2 --heads 16 --seqlen 8192 --dim 256
one d128-s8k "" --batch 2 --heads 16 --seqlen 8192 --dim 128
python3 - $OUT <<'PY'
import json, sys, statistics as st, glob
O = sys.argv[1]
for l in open(O + '/runs.jsonl'):
    d = json.loads(l)
    if not d['r']: print(d['tag'], 'failed'); continue
    r = d['r'][0]; t = r['times_ms']; m = r['min_ms']
    slow = sum(1 for x in t if x > 1.05 * m)
    rows = [x.split(', ') for x in open(f"{O}/smi-{d['tag']}.csv").read().strip().split('\n') if x.count(',') >= 4]
    clk = [int(x[1].split()[0]) for x in rows[-60:]]; pw = [float(x[2].split()[0]) for x in rows[-60:]]
    print(f"{d['tag']:12s} min {m:.3f} med {r['median_ms']:.3f} max {r['max_ms']:.3f} ms, {slow}/{len(t)} launches >5% over min; "
          f"last 1.2 s: clock {min(clk)}-{max(clk)} MHz med {st.median(clk)}, power med {st.median(pw):.0f} W")
    print('   ', ' '.join(f"{x:.2f}" for x in t))
PY
