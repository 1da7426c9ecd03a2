#!/usr/bin/env bash
# Session 12 run 5: main with the ping-pong schedule in the heuristic (9e37ce0) against main
# before it (740cada): full suite; ncu of cooperative vs ping-pong at 2048x2048x4096 (one wave,
# where ping-pong lost 11 %); three rotated rounds at the shapes the rule changes (and 4096^3 as
# a control); then issue 3's target set in all four layouts with the new binary, one run.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
O=.carry/s12/kiln-head; N=.carry/s12/kiln-new; chmod +x $O $N
NCU=$(command -v ncu)
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "old: $(cat .carry/s12/commit-head); new: $(cat .carry/s12/commit-new)"; } > $OUT/machine.txt
timeout 300 $N --no-store verify --suite full --version wgmma_tma_ws > $OUT/verify.txt 2>&1; rc=$?; echo "verify exit $rc: $(tail -1 $OUT/verify.txt)"; [ $rc -ne 0 ] && exit 1
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_op_read.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
: > $OUT/ncu.csv
for cfg in large pingpong; do
  echo "== 2048x2048x4096 $cfg" >> $OUT/ncu.csv
  KILN_WGMMA_CFG=$cfg $N --no-store bench --shape 2048x2048x4096 --reps 2 --warmup 1 > /dev/null 2>&1
  KILN_WGMMA_CFG=$cfg timeout 200 $NCU --clock-control none --metrics $M -k regex:'gemm_wgmma' --launch-skip 2 -c 1 --csv --page raw $N --no-store bench --shape 2048x2048x4096 --reps 3 --warmup 1 >> $OUT/ncu.csv 2>> $OUT/err.txt
done
python3 - $OUT/ncu.csv <<'PY' | tee $OUT/ncu-summary.txt
import csv, sys
tag = None; hdr = None
for line in open(sys.argv[1]):
    if line.startswith('== '): tag = line[3:].strip(); hdr = None; continue
    r = next(csv.reader([line]))
    if 'Kernel Name' in r: hdr = r; continue
    if hdr and len(r) == len(hdr) and r[0].strip().isdigit():
        d = dict(zip(hdr, r)); f = lambda k: float(d[k].replace(',', ''))
        t = f('gpu__time_duration.sum')
        print(f"{tag:28s} {t/1e3:7.1f} us {f('sm__cycles_elapsed.avg.per_second')/1e9:.3f} GHz tensor {f('sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed'):5.1f}% L2 read {f('lts__t_sectors_op_read.sum')*32/1e9:5.2f} GB thr {f('lts__throughput.avg.pct_of_peak_sustained_elapsed'):5.1f}% dram {f('dram__bytes_read.sum')/1e9:5.3f} GB {f('dram__throughput.avg.pct_of_peak_sustained_elapsed'):5.1f}%")
PY
: > $OUT/ab.jsonl
CASES="2048x2048x2048:RC 2048x2048x2048:CR 2048x2048x2048:RR 2048x2048x2048:CC 2048x2048x1024:RC 1024x4096x1024:RC 4096x4096x4096:RC"
V="old new"
for round in 1 2 3; do
  for c in $CASES; do
    s=${c%:*}; l=${c#*:}
    for v in $V; do
      B=$O; [ $v = new ] && B=$N
      r=$(timeout 90 $B --no-store bench --shape $s --layout $l --reps 40 --json 2>>$OUT/err.txt)
      echo "{\"shape\":\"$s $l\",\"v\":\"$v\",\"round\":$round,\"r\":$r}" >> $OUT/ab.jsonl
    done
  done
  V="${V#* } ${V%% *}"
done
python3 .carry/s12/parse_ab.py $OUT/ab.jsonl | tee $OUT/summary.txt
$N --no-store --json bench --set targets --layouts RC,CR,RR,CC --reps 30 > $OUT/targets.json 2>>$OUT/err.txt
python3 - $OUT/targets.json <<'PY' | tee $OUT/targets.txt
import json, sys, math, collections
rows = json.load(open(sys.argv[1])); t = collections.defaultdict(dict); order = []
for r in rows:
    p = r['problem']; k = f"{p['m']}x{p['n']}x{p['k']}"
    if k not in order: order.append(k)
    t[p['layout']][k] = r['versions'][0][1]
ls = [l for l in ('RC', 'CR', 'RR', 'CC') if l in t]
print(f"{'shape':18s} " + " ".join(f"{l:>6s}" for l in ls))
for k in order: print(f"{k:18s} " + " ".join(f"{t[l].get(k, float('nan')):6.3f}" for l in ls))
for l in ls:
    g = list(t[l].values())
    print(f"{l}: geomean {math.exp(sum(map(math.log, g)) / len(g)):.3f}, lowest {min(g):.3f}, under 0.95: {sum(1 for x in g if x < 0.95)}")
allg = [x for l in ls for x in t[l].values()]
print(f"all: geomean {math.exp(sum(map(math.log, allg)) / len(allg)):.3f}")
PY
