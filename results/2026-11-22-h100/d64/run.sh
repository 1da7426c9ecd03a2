#!/bin/bash
# The new d64 default through the default path: full attention suite + large/ragged d64 problems,
# then the six d64 shapes against SDPA cuDNN, two alternating rounds.
export KILN_STORE=$OUT/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln; chmod +x $B; L=$OUT/d64; mkdir -p $L
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
{ nvidia-smi --query-gpu=name,power.limit --format=csv,noheader; date -u; } > $L/device.txt
fail=0
v() { timeout 90 $B --no-store attn verify --version fa3_wgmma "$@" >> $L/verify.txt 2>&1 || { echo "VERIFY FAILED: $*" | tee -a $L/verify.txt; fail=1; }; }
v --suite full
v --batch 2 --heads 16 --kv-heads 4 --seqlen 4096 --dim 64 --causal
v --batch 2 --heads 16 --seqlen 4096 --dim 64
v --batch 3 --heads 6 --kv-heads 1 --seqlen-q 2000 --seqlen-kv 1500 --dim 64 --layout BHSD --dtype f16 --causal
v --batch 1 --heads 4 --seqlen-q 300 --seqlen-kv 5000 --dim 64 --layout BHSD --dtype f16 --causal
v --batch 2 --heads 4 --seqlen-q 700 --seqlen-kv 300 --dim 64 --causal
echo "verify failures: $fail" | tee $L/verified.txt; tail -4 $L/verify.txt | head -3
[ $fail = 0 ] || exit 1
shapes="4,16,4096,64;2,16,8192,64;1,16,16384,64;4,16,4096,64,causal;2,16,8192,64,causal;1,16,16384,64,causal"
for round in 1 2; do
  timeout 60 $PY scripts/attention_peer.py --reps 10 --shapes "$shapes" | sed "s/^{/{\"round\": $round, /" >> $L/peer.jsonl 2>> $L/peer.err
  for c in "" "--causal"; do for bs in "4 4096" "2 8192" "1 16384"; do set -- $bs
    rows=$(timeout 60 $B --no-store --json attn bench --batch $1 --heads 16 --seqlen $2 --dim 64 $c --version fa3_wgmma --reps 10 --warmup 3 2>>$L/bench.err | tr -d '\n')
    echo "{\"round\": $round, \"b\": $1, \"s\": $2, \"d\": 64, \"causal\": $([ -n "$c" ] && echo true || echo false), \"rows\": ${rows:-null}}" >> $L/bench.jsonl
  done; done
done
$PY - $L <<'PYEOF' | tee $L/summary.txt
import json, sys, os, statistics as st
L = sys.argv[1]; peer, k = {}, {}
for line in open(os.path.join(L, "peer.jsonl")):
    if line.startswith("{"):
        r = json.loads(line); peer.setdefault((r["batch"], r["seqlen"], r["causal"]), []).append(r["cudnn_tflops"])
for line in open(os.path.join(L, "bench.jsonl")):
    r = json.loads(line)
    if r["rows"]: k.setdefault((r["b"], r["s"], r["causal"]), []).append(r["rows"][0]["tflops"])
for key in sorted(k, key=lambda x: (x[2], x[1])):
    f, c = st.mean(k[key]), st.mean(peer[key])
    print(f"d64 B{key[0]} S{key[1]}{' causal' if key[2] else ''}: fa3 {f:.1f} {[round(x) for x in k[key]]} cuDNN {c:.1f} {[round(x) for x in peer[key]]} ratio {f / c:.3f}")
PYEOF
cd $OUT && tar czf d64.tgz d64 && rm -rf d64
