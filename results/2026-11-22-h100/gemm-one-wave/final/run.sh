#!/usr/bin/env bash
# Session 11 run 9: main after the even-ring and attention-split fixes: attention quick suite,
# the GEMM target set in all four layouts (one run); then ncu --set full of kiln's single-CTA
# SMALL kernel, its SMALL_PAIR experiment (kiln-sp2, KILN_WGMMA_CFG=small_pair) and cuBLAS's
# 128x128 2x1 pair kernel at 512x4096x4096 RC (details pages as CSV), to see what kiln's
# multicast pairs do differently.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s11/kiln-final; SP=.carry/s11/kiln-sp2; chmod +x $B $SP
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "main $(cat .carry/s11/commit-final)"; } > $OUT/machine.txt
timeout 200 $B --no-store attn verify --suite quick > $OUT/attn-verify-quick.txt 2>&1; echo "attn verify quick rc $?: $(tail -1 $OUT/attn-verify-quick.txt)"
timeout 420 $B --no-store --json bench --set targets --layouts RC,CR,RR,CC --reps 30 > $OUT/targets.json 2>>$OUT/err.txt; echo "targets rc $?"
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
NCU=$(command -v ncu)
prof() { # tag regex skip bin env...
  local tag=$1 rx=$2 skip=$3 bin=$4; shift 4
  env "$@" timeout 150 $NCU --set full --clock-control none -k regex:$rx --launch-skip $skip -c 1 -o $OUT/$tag -f $bin --no-store bench --shape 512x4096x4096 --layout RC --reps 2 --warmup 1 > $OUT/$tag.log 2>&1
  echo "ncu $tag rc $?"
  $NCU --import $OUT/$tag.ncu-rep --page details --csv > $OUT/$tag-details.csv 2>/dev/null
}
prof single gemm_wgmma 2 $B
prof pair gemm_wgmma 2 $SP KILN_WGMMA_CFG=small_pair
prof cublas nvjet 2 $B
python3 - $OUT <<'PY' | tee $OUT/ncu-compare.txt
import csv, sys, collections
d = collections.OrderedDict()
for tag in ('single', 'pair', 'cublas'):
    try: rows = list(csv.DictReader(open(f"{sys.argv[1]}/{tag}-details.csv")))
    except Exception as e: print(tag, 'no data', e); continue
    for r in rows:
        k = (r.get('Section Name', ''), r.get('Metric Name', ''), r.get('Metric Unit', ''))
        d.setdefault(k, {})[tag] = r.get('Metric Value', '')
want = ('Duration', 'Memory Throughput', 'L1/TEX Hit Rate', 'L2 Hit Rate', 'DRAM Throughput', 'L2 Cache Throughput', 'Compute (SM) Throughput', 'Executed Ipc Active', 'Registers Per Thread', 'Dynamic Shared Memory Per Block', 'Achieved Occupancy', 'Mem Busy', 'Max Bandwidth', 'Mem Pipes Busy', 'L2 Compression', 'Cluster Size', 'Grid Size', 'Threads', 'Issue Slots Busy', 'SM Busy', 'One or More Eligible', 'No Eligible', 'Warp Cycles Per Issued Instruction')
for (sec, name, unit), v in d.items():
    if any(w in name for w in want):
        print(f"{sec[:28]:28} {name[:40]:40} {unit[:10]:10} " + "  ".join(f"{t}={v.get(t, '-')}" for t in ('single', 'pair', 'cublas')))
PY
rm -f $OUT/*.ncu-rep
