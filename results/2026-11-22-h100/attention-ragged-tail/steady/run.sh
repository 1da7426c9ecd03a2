#!/usr/bin/env bash
# Steady state (session 5): the runs so far warmed up 5 launches, and at d256 S 8k/16k the GPU's
# first second of load runs some launches faster than it can sustain (warm.sh: with 200 warm-up
# launches every launch takes the slow time). Here kiln and SDPA cuDNN both warm up 200 launches
# (over a second of load) before 30 timed ones, alternating, three rounds, at the six d256 issue
# shapes and the tightest d128 one.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-final; chmod +x $B
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "commit 3378f70"; } > $OUT/machine.txt
SH="256 4 4096 -;256 2 8192 -;256 1 16384 -;256 4 4096 --causal;256 2 8192 --causal;256 1 16384 --causal;128 4 4096 -"
PS="4,16,4096,256;2,16,8192,256;1,16,16384,256;4,16,4096,256,causal;2,16,8192,256,causal;1,16,16384,256,causal;4,16,4096,128"
: > $OUT/bench.jsonl; : > $OUT/peer.jsonl
for round in 1 2 3; do
  IFS=';'; for sh in $SH; do IFS=' '; set -- $sh; c=$4; [ "$c" = "-" ] && c=""
    r=$(timeout 90 $B --no-store --json attn bench --batch $2 --heads 16 --seqlen $3 --dim $1 $c --version fa3_wgmma --reps 30 --warmup 200 2>>$OUT/bench.err | tr -d '\n')
    echo "{\"round\":$round,\"d\":$1,\"b\":$2,\"s\":$3,\"causal\":$([ -n "$c" ] && echo true || echo false),\"rows\":${r:-null}}" >> $OUT/bench.jsonl
  done; IFS=' '
  timeout 300 $PY scripts/attention_peer.py --reps 30 --warmup 200 --shapes "$PS" >> $OUT/peer.jsonl 2>>$OUT/peer.err
done
$PY - $OUT <<'PYEOF'
import json,sys,collections,statistics as st
O=sys.argv[1]
res=collections.defaultdict(list); mins=collections.defaultdict(list); peer=collections.defaultdict(list)
for l in open(O+'/bench.jsonl'):
    d=json.loads(l)
    for r in (d['rows'] or []):
        k=(d['d'],d['b'],d['s'],d['causal']); res[k].append(r['tflops']); mins[k].append(r['tflops']*r['median_ms']/r['min_ms'])
for l in open(O+'/peer.jsonl'):
    d=json.loads(l); peer[(d['dim'],d['batch'],d['seqlen'],d['causal'])].append(d['cudnn_tflops'])
for k in sorted(res):
    f=st.median(res[k]); p=st.median(peer[k])
    print(f"d{k[0]} B{k[1]} S{k[2]} {'causal' if k[3] else 'full'}: fa3 {f:.1f} {[round(x) for x in res[k]]} (fastest launch {max(mins[k]):.0f}) cuDNN {p:.1f} {[round(x) for x in peer[k]]} x {f/p:.3f} (slowest kiln / fastest cuDNN {min(res[k])/max(peer[k]):.3f})")
PYEOF
