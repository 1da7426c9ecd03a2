#!/usr/bin/env bash
# Idle-consumer skip and split items for the ragged last query block (fa3_wgmma, ledger #16/#17):
# verification of the new binary (full suite, static/non-persistent configs, two large
# problems), then head / idle / split alternating with SDPA cuDNN, three rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=$OUT/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
L=.carry/lead; chmod +x $L/kiln-*
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; lscpu | grep -E "Model name|^CPU\(s\)|MHz"; } > $OUT/machine.txt
B=$L/kiln-split
{
timeout 300 $B --no-store attn verify --version fa3_wgmma; echo "full exit $?"
KILN_FA3_D128=dynamic=0 KILN_FA3_D64=dynamic=0 timeout 120 $B --no-store attn verify --version fa3_wgmma --suite quick; echo "static exit $?"
KILN_FA3_D128=dynamic=0,persist=0 KILN_FA3_D64=dynamic=0,persist=0 timeout 120 $B --no-store attn verify --version fa3_wgmma --suite quick; echo "one-per-item exit $?"
for d in 128 64; do
  timeout 120 $B --no-store attn verify --version fa3_wgmma --batch 1 --heads 16 --seqlen 4096 --dim $d; echo "S4096 d$d exit $?"
  timeout 60 $B --no-store attn verify --version fa3_wgmma --batch 2 --heads 16 --seqlen 1000 --dim $d; echo "S1000 d$d exit $?"
  timeout 60 $B --no-store attn verify --version fa3_wgmma --batch 2 --heads 16 --seqlen 1000 --dim $d --causal; echo "S1000 causal d$d exit $?"
  KILN_FA3_D$d=dynamic=0 timeout 60 $B --no-store attn verify --version fa3_wgmma --batch 2 --heads 16 --seqlen 1000 --dim $d; echo "S1000 static d$d exit $?"
  timeout 60 $B --no-store attn verify --version fa3_wgmma --batch 3 --heads 16 --seqlen-q 1000 --seqlen-kv 777 --dim $d --layout BHSD --dtype f16; echo "S1000x777 BHSD f16 d$d exit $?"
done
} > $OUT/verify.txt 2>&1
grep -E "exit|fa3_wgmma" $OUT/verify.txt | tail -24
SH="128 4 4096 -;128 4 4096 --causal;128 2 8192 -;64 4 4096 -;64 4 4096 --causal"
PS="4,16,4096,128;4,16,4096,128,causal;2,16,8192,128;4,16,4096,64;4,16,4096,64,causal"
: > $OUT/bench.jsonl
for round in 1 2 3; do
  for bin in head split; do
    IFS=';'; for sh in $SH; do IFS=' '; set -- $sh; c=$4; [ "$c" = "-" ] && c=""
      r=$(timeout 60 $L/kiln-$bin --no-store --json attn bench --batch $2 --heads 16 --seqlen $3 --dim $1 $c --version fa3_wgmma --reps 20 --warmup 5 2>>$OUT/bench.err | tr -d '\n')
      echo "{\"round\":$round,\"bin\":\"$bin\",\"d\":$1,\"b\":$2,\"s\":$3,\"causal\":$([ -n "$c" ] && echo true || echo false),\"rows\":${r:-null}}" >> $OUT/bench.jsonl
    done; IFS=' '
  done
  timeout 200 $PY scripts/attention_peer.py --reps 20 --shapes "$PS" > $OUT/peer$round.jsonl 2>>$OUT/peer.err
done
$PY - $OUT <<'PYEOF'
import json,sys,collections,statistics as st
O=sys.argv[1]
res=collections.defaultdict(list); peer=collections.defaultdict(list)
for l in open(O+'/bench.jsonl'):
    d=json.loads(l)
    for r in (d['rows'] or []):
        if r.get('version')=='fa3_wgmma': res[(d['d'],d['b'],d['s'],d['causal'],d['bin'])].append(r['tflops'])
for rd in (1,2,3):
    for l in open(f'{O}/peer{rd}.jsonl'):
        d=json.loads(l); peer[(d['dim'],d['batch'],d['seqlen'],d['causal'])].append(d['cudnn_tflops'])
shapes=sorted({k[:4] for k in res})
print("shape | cuDNN | head | split | split/head | split/cuDNN")
for s in shapes:
    c=st.median(peer[s]) if peer[s] else float('nan')
    m={b: st.median(res[s+(b,)]) if res[s+(b,)] else float('nan') for b in ("head","split")}
    print(f"d{s[0]} B{s[1]} S{s[2]} {'causal' if s[3] else 'full'} | {c:.1f} {[round(x,1) for x in peer[s]]} | {m['head']:.1f} | {m['split']:.1f} {[round(x,1) for x in res[s+('split',)]]} | {m['split']/m['head']:.3f} | {m['split']/c:.3f}")
PYEOF
