#!/usr/bin/env bash
# Session 12 run 3: (a) where ping-pong beats the cooperative default (suite shapes and short K,
# two rotated rounds, cuBLAS in the same process); (b) the power hypothesis from run 2 (ncu: one
# isolated launch each, ping-pong 182.1 us against 180.2 at 4096^3, yet 204 against 175 us in the
# benchmark): SM clock and board power sampled every 20 ms through a sustained benchmark of each.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s12/kiln; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: $(cat .carry/s12/commit) + working tree (ping-pong)"; } > $OUT/machine.txt
# (b) first, on a cool GPU after a 20 s rest each
: > $OUT/power.txt
for v in coop pp coop pp; do
  E=X=1; [ $v = pp ] && E=KILN_WGMMA_CFG=pingpong
  env $E $B --no-store bench --shape 256x256x256 --reps 2 > /dev/null 2>&1   # compile first
  sleep 20
  nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 20 > $OUT/smi-$v.txt &
  SMI=$!
  r=$(env $E $B --no-store bench --shape 4096x4096x4096 --reps 6000 --sequential --json 2>>$OUT/err.txt)
  kill $SMI; wait $SMI 2>/dev/null
  python3 - $v "$r" $OUT/smi-$v.txt <<'PY' | tee -a $OUT/power.txt
import sys, json, statistics as st
v, r, f = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
r = r[0] if isinstance(r, list) else r
s = [tuple(map(float, l.split(','))) for l in open(f) if l.strip() and 'N/A' not in l]
busy = [x for x in s if x[1] > 300]
h = len(busy) // 2; a, b = busy[:h], busy[h:]  # --sequential: cuBLAS's reps first, then kiln's
print(f"{v:5s} kiln {r['versions'][0][0]['median_ms']*1e3:7.1f} us cublas {r['vendor']['median_ms']*1e3:7.1f} us; samples over 300 W: {len(busy)}; first half (cuBLAS) SM clock median {st.median(x[0] for x in a):.0f} MHz, power {st.median(x[1] for x in a):.0f} W; second half (kiln) {st.median(x[0] for x in b):.0f} MHz, {st.median(x[1] for x in b):.0f} W")
PY
done
# (a)
: > $OUT/ab.jsonl
CASES="2048x2048x2048:RC 2048x2048x2048:CR 2048x2048x2048:RR 2048x2048x2048:CC 4096x4096x2048:RC 8192x8192x1024:RC 512x14336x4096:RC 2048x14336x4096:RC 512x128256x4096:RC 4000x4000x4000:RC 4096x4096x4088:RC 1024x1024x1024:RC"
V="coop pp"
for round in 1 2; do
  for c in $CASES; do
    s=${c%:*}; l=${c#*:}
    for v in $V; do
      E=X=1; [ $v = pp ] && E=KILN_WGMMA_CFG=pingpong
      r=$(env $E timeout 90 $B --no-store bench --shape $s --layout $l --reps 40 --json 2>>$OUT/err.txt)
      echo "{\"shape\":\"$s $l\",\"v\":\"$v\",\"round\":$round,\"r\":$r}" >> $OUT/ab.jsonl
    done
  done
  V="${V#* } ${V%% *}"
done
python3 .carry/s12/parse_ab.py $OUT/ab.jsonl | tee $OUT/summary.txt
cat $OUT/power.txt
rm -f $OUT/smi-*.txt
