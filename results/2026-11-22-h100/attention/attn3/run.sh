#!/bin/bash
# Final attention run (issue 6) on the H100: every fa3_wgmma default verified (full suite + large
# and ragged problems per head dim), then three alternating rounds of SDPA peers and kiln at the
# 18 issue shapes (medians reported), plus composed and fa2_mma_sync once for the README table.
export KILN_STORE=$OUT/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln; chmod +x $B
L=$OUT/attn3; mkdir -p $L
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $L/device.txt; git log -1 --format=%H >> $L/device.txt; date -u >> $L/device.txt
v() { timeout 90 $B --no-store attn verify --version fa3_wgmma "$@" >> $L/verify.txt 2>&1 || { echo "VERIFY FAILED: $*" | tee -a $L/verify.txt; fail=1; }; }
fail=0
v --suite full
for d in 64 128 256; do
  v --batch 2 --heads 16 --kv-heads 4 --seqlen 4096 --dim $d --causal
  v --batch 2 --heads 16 --seqlen 4096 --dim $d
  v --batch 3 --heads 6 --kv-heads 1 --seqlen-q 2000 --seqlen-kv 1500 --dim $d --layout BHSD --dtype f16 --causal
  v --batch 1 --heads 4 --seqlen-q 300 --seqlen-kv 5000 --dim $d --layout BHSD --dtype f16 --causal
  v --batch 2 --heads 4 --seqlen-q 700 --seqlen-kv 300 --dim $d --causal
done
echo "verify failures: $fail" | tee $L/verified.txt
[ $fail = 0 ] || exit 1
shapes=""; for d in 128 64 256; do for c in "" ",causal"; do for bs in 4,4096 2,8192 1,16384; do
  b=${bs%,*}; s=${bs#*,}; shapes="$shapes;$b,16,$s,$d$c"; done; done; done
shapes=${shapes#;}
# Warm the GPU up (clocks, power state) before the first timed peer.
timeout 30 $B --no-store attn bench --batch 2 --heads 16 --seqlen 8192 --dim 128 --version fa3_wgmma --reps 50 --warmup 10 > /dev/null 2>&1
for round in 1 2 3; do
  timeout 100 $PY scripts/attention_peer.py --reps 10 --shapes "$shapes" | sed "s/^{/{\"round\": $round, /" >> $L/peer.jsonl 2>> $L/peer.err
  for d in 128 64 256; do for c in "" "--causal"; do for bs in "4 4096" "2 8192" "1 16384"; do set -- $bs
    V="--version fa3_wgmma"; [ $round = 1 ] && V="--version composed --version fa2_mma_sync --version fa3_wgmma"
    rows=$(timeout 60 $B --no-store --json attn bench --batch $1 --heads 16 --seqlen $2 --dim $d $c $V --reps 10 --warmup 3 2>>$L/bench.err | tr -d '\n')
    echo "{\"round\": $round, \"b\": $1, \"s\": $2, \"d\": $d, \"causal\": $([ -n "$c" ] && echo true || echo false), \"rows\": ${rows:-null}}" >> $L/bench.jsonl
  done; done; done
done
$PY - $L <<'PYEOF' | tee $L/summary.txt
import json, sys, os, statistics as st
L = sys.argv[1]
peer, kiln, other = {}, {}, {}
for line in open(os.path.join(L, "peer.jsonl")):
    if line.startswith("{"):
        r = json.loads(line); k = (r["dim"], r["batch"], r["seqlen"], r["causal"])
        peer.setdefault(k, {"cudnn": [], "flash": []})
        for n in ("cudnn", "flash"):
            if r.get(n + "_tflops"): peer[k][n].append(r[n + "_tflops"])
for line in open(os.path.join(L, "bench.jsonl")):
    r = json.loads(line); k = (r["d"], r["b"], r["s"], r["causal"])
    for x in r["rows"] or []:
        if x["version"] == "fa3_wgmma": kiln.setdefault(k, []).append(x["tflops"])
        else: other.setdefault(k, {})[x["version"]] = x["tflops"]
print("| head dim | shape | composed | fa2_mma_sync | fa3_wgmma (median of 3) | cuDNN SDPA (median of 3) | FA2 SDPA | fa3 / cuDNN | fa3 runs | cuDNN runs |")
print("|---|---|---|---|---|---|---|---|---|---|")
for k in sorted(kiln, key=lambda k: ({128: 0, 64: 1, 256: 2}[k[0]], k[3], k[2])):
    f, c, fl = st.median(kiln[k]), st.median(peer[k]["cudnn"]), st.median(peer[k]["flash"])
    o = other.get(k, {})
    print(f"| {k[0]} | B{k[1]} S{k[2]}{' causal' if k[3] else ''} | {o.get('composed', float('nan')):.1f} | {o.get('fa2_mma_sync', float('nan')):.1f} | **{f:.1f}** | {c:.1f} | {fl:.1f} | {f / c:.3f} | {', '.join(f'{x:.0f}' for x in kiln[k])} | {', '.join(f'{x:.0f}' for x in peer[k]['cudnn'])} |")
PYEOF
cd $OUT && tar czf attn3.tgz attn3 && rm -rf attn3
