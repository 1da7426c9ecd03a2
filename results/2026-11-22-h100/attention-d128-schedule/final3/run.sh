#!/usr/bin/env bash
# Session 4 final: fa3_wgmma through the default path at all 18 issue shapes (d64/128/256 x
# B4S4096/B2S8192/B1S16384 x causal), three rounds alternating with SDPA cuDNN/FA2.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=$OUT/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-order2; chmod +x $B
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; git log -1 --format=%H; date -u; } > $OUT/machine.txt
timeout 300 $B --no-store attn verify > $OUT/verify-attn.txt 2>&1; echo "attn verify (full) exit $?"; tail -3 $OUT/verify-attn.txt
: > $OUT/bench.jsonl
shapes=""; for d in 128 64 256; do for c in "" ",causal"; do for bs in 4,4096 2,8192 1,16384; do shapes="$shapes;${bs%,*},16,${bs#*,},$d$c"; done; done; done
for round in 1 2 3; do
  for d in 128 64 256; do for c in "" "--causal"; do for bs in "4 4096" "2 8192" "1 16384"; do set -- $bs
    r=$(timeout 60 $B --no-store --json attn bench --batch $1 --heads 16 --seqlen $2 --dim $d $c --version fa3_wgmma --reps 20 --warmup 5 2>>$OUT/bench.err | tr -d '\n')
    echo "{\"round\":$round,\"b\":$1,\"s\":$2,\"d\":$d,\"causal\":$([ -n "$c" ] && echo true || echo false),\"rows\":${r:-null}}" >> $OUT/bench.jsonl
  done; done; done
  timeout 240 $PY scripts/attention_peer.py --reps 20 --shapes "${shapes#;}" > $OUT/peer$round.jsonl 2>>$OUT/peer.err
done
$PY - $OUT <<'PYEOF'
import json,sys,collections,statistics as st
O=sys.argv[1]
res=collections.defaultdict(list); peer=collections.defaultdict(list); fa2=collections.defaultdict(list)
for l in open(O+'/bench.jsonl'):
    d=json.loads(l)
    for r in (d['rows'] or []):
        if r.get('version')=='fa3_wgmma': res[(d['d'],d['b'],d['s'],d['causal'])].append(r['tflops'])
for rd in (1,2,3):
    for l in open(f'{O}/peer{rd}.jsonl'):
        d=json.loads(l); k=(d['dim'],d['batch'],d['seqlen'],d['causal']); peer[k].append(d['cudnn_tflops']); fa2[k].append(d['flash_tflops'])
print("| head dim | shape | fa3_wgmma | cuDNN SDPA | FA2 SDPA | fa3 / cuDNN |")
for k in sorted(res, key=lambda k:(-k[0]==-128 and 0 or 1, k)):
    f=st.median(res[k]); c=st.median(peer[k]); a=st.median(fa2[k])
    print(f"| {k[0]} | B{k[1]} S{k[2]}{' causal' if k[3] else ''} | {f:.1f} | {c:.1f} | {a:.1f} | {f/c:.3f} |   fa3 {[round(x,1) for x in res[k]]} cudnn {peer[k]}")
PYEOF
