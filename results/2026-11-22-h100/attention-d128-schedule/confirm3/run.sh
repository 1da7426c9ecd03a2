#!/usr/bin/env bash
# Repeat of the closest shapes to the issue-6 lines with the final defaults: d256 (six shapes)
# and d128 B4 S4096 (both), three rounds alternating with SDPA.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=$OUT/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-order2; chmod +x $B
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
: > $OUT/bench.jsonl
SH="256 4 4096 -;256 2 8192 -;256 1 16384 -;256 4 4096 --causal;256 2 8192 --causal;256 1 16384 --causal;128 4 4096 -;128 4 4096 --causal"
PS="4,16,4096,256;2,16,8192,256;1,16,16384,256;4,16,4096,256,causal;2,16,8192,256,causal;1,16,16384,256,causal;4,16,4096,128;4,16,4096,128,causal"
for round in 1 2 3; do
  IFS=';'; for sh in $SH; do IFS=' '; set -- $sh; c=$4; [ "$c" = "-" ] && c=""
    r=$(timeout 60 $B --no-store --json attn bench --batch $2 --heads 16 --seqlen $3 --dim $1 $c --version fa3_wgmma --reps 20 --warmup 5 2>>$OUT/bench.err | tr -d '\n')
    echo "{\"round\":$round,\"d\":$1,\"b\":$2,\"s\":$3,\"causal\":$([ -n "$c" ] && echo true || echo false),\"rows\":${r:-null}}" >> $OUT/bench.jsonl
  done; IFS=' '
  timeout 200 $PY scripts/attention_peer.py --reps 20 --shapes "$PS" > $OUT/peer$round.jsonl 2>>$OUT/peer.err
done
$PY - $OUT <<'PYEOF'
import json,sys,collections,statistics as st
O=sys.argv[1]
res=collections.defaultdict(list); peer=collections.defaultdict(list)
for l in open(O+'/bench.jsonl'):
    d=json.loads(l)
    for r in (d['rows'] or []):
        if r.get('version')=='fa3_wgmma': res[(d['d'],d['b'],d['s'],d['causal'])].append(r['tflops'])
for rd in (1,2,3):
    for l in open(f'{O}/peer{rd}.jsonl'):
        d=json.loads(l); peer[(d['dim'],d['batch'],d['seqlen'],d['causal'])].append(d['cudnn_tflops'])
for k in sorted(res):
    f=st.median(res[k]); c=st.median(peer[k])
    print(f"d{k[0]} B{k[1]} S{k[2]} {'causal' if k[3] else 'full'}: fa3 {f:.1f} {[round(x,1) for x in res[k]]} cuDNN {c:.1f} {peer[k]} x {f/c:.3f} (vs best cuDNN round {f/max(peer[k]):.3f})")
PYEOF
