#!/usr/bin/env bash
# Session 5 final (second, after the d256 counter; peers appended to one file, so that every
# output comes back: the device returns at most 8 files): every attention version verified (full suite), then fa3_wgmma through the
# default path at the 18 issue shapes (d64/128/256 x B4S4096/B2S8192/B1S16384 x causal), five
# rounds alternating with SDPA cuDNN/FA2. Binary: .carry/lead/kiln-final (commit e9a48b8).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=$OUT/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-final; chmod +x $B
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; echo "commit e9a48b8"; date -u; } > $OUT/machine.txt
timeout 240 $B --no-store attn verify > $OUT/verify.txt 2>&1; echo "attn verify (full, all versions) exit $?"; tail -5 $OUT/verify.txt
: > $OUT/bench.jsonl; : > $OUT/peer.jsonl
shapes=""; for d in 128 64 256; do for c in "" ",causal"; do for bs in 4,4096 2,8192 1,16384; do shapes="$shapes;${bs%,*},16,${bs#*,},$d$c"; done; done; done
for round in 1 2 3 4 5; do
  for d in 128 64 256; do for c in "" "--causal"; do for bs in "4 4096" "2 8192" "1 16384"; do set -- $bs
    r=$(timeout 60 $B --no-store --json attn bench --batch $1 --heads 16 --seqlen $2 --dim $d $c --version fa3_wgmma --reps 20 --warmup 5 2>>$OUT/bench.err | tr -d '\n')
    echo "{\"round\":$round,\"b\":$1,\"s\":$2,\"d\":$d,\"causal\":$([ -n "$c" ] && echo true || echo false),\"rows\":${r:-null}}" >> $OUT/bench.jsonl
  done; done; done
  timeout 240 $PY scripts/attention_peer.py --reps 20 --shapes "${shapes#;}" >> $OUT/peer.jsonl 2>>$OUT/peer.err
done
$PY - $OUT <<'PYEOF'
import json,sys,collections,statistics as st
O=sys.argv[1]
res=collections.defaultdict(list); peer=collections.defaultdict(list); fa2=collections.defaultdict(list)
for l in open(O+'/bench.jsonl'):
    d=json.loads(l)
    for r in (d['rows'] or []):
        if r.get('version')=='fa3_wgmma': res[(d['d'],d['b'],d['s'],d['causal'])].append(r['tflops'])
for l in open(f'{O}/peer.jsonl'):
    d=json.loads(l); k=(d['dim'],d['batch'],d['seqlen'],d['causal']); peer[k].append(d['cudnn_tflops']); fa2[k].append(d['flash_tflops'])
print("| head dim | shape | fa3_wgmma | cuDNN SDPA | FA2 SDPA | fa3 / cuDNN | fa3 / best cuDNN round | fa3 rounds | cuDNN rounds |")
for dd in (128,64,256):
  for c in (False,True):
    for b,s in ((4,4096),(2,8192),(1,16384)):
      k=(dd,b,s,c); f=st.median(res[k]); p=st.median(peer[k])
      print(f"| {dd} | B{b} S{s}{' causal' if c else ''} | {f:.1f} | {p:.1f} | {st.median(fa2[k]):.1f} | {f/p:.3f} | {f/max(peer[k]):.3f} | {min(res[k]):.0f}-{max(res[k]):.0f} | {min(peer[k]):.0f}-{max(peer[k]):.0f} |")
PYEOF
