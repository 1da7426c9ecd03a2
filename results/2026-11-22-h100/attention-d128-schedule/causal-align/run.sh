#!/usr/bin/env bash
# Causal query blocks aligned to the last row (the ragged 192-row block at the top): full
# attention verify with the new binary, then old (b2a0214) vs new on the causal d128/d64 shapes
# (and two non-causal controls), two alternating rounds, SDPA cuDNN in each.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=$OUT/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
N=.carry/lead/kiln-align; O=.carry/lead/kiln-new; chmod +x $N $O
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; } > $OUT/machine.txt
timeout 300 $N --no-store attn verify > $OUT/verify-attn.txt 2>&1; echo "attn verify (full) exit $?"; tail -4 $OUT/verify-attn.txt
SH="4 4096 128 --causal;2 8192 128 --causal;1 16384 128 --causal;4 4096 64 --causal;2 8192 64 --causal;1 16384 64 --causal;4 4096 128 -;4 4096 64 -"
PS="4,16,4096,128,causal;2,16,8192,128,causal;1,16,16384,128,causal;4,16,4096,64,causal;2,16,8192,64,causal;1,16,16384,64,causal;4,16,4096,128;4,16,4096,64"
: > $OUT/ab.jsonl
for round in 1 2; do
  for bin in O N; do B=${!bin}
    IFS=';'; for sh in $SH; do IFS=' '; set -- $sh; c=$4; [ "$c" = "-" ] && c=""
      r=$(timeout 60 $B --no-store --json attn bench --batch $1 --heads 16 --seqlen $2 --dim $3 $c --version fa3_wgmma --reps 20 --warmup 5 2>>$OUT/bench.err | tr -d '\n')
      echo "{\"round\":$round,\"bin\":\"$bin\",\"b\":$1,\"s\":$2,\"d\":$3,\"causal\":$([ -n "$c" ] && echo true || echo false),\"rows\":${r:-null}}" >> $OUT/ab.jsonl
    done; IFS=' '
  done
  timeout 200 $PY scripts/attention_peer.py --reps 20 --shapes "$PS" > $OUT/peer$round.jsonl 2>>$OUT/peer.err
done
$PY - $OUT <<'PYEOF'
import json,sys,collections
O=sys.argv[1]
res=collections.defaultdict(list); peer=collections.defaultdict(list)
for l in open(O+'/ab.jsonl'):
    d=json.loads(l)
    for r in (d['rows'] or []):
        if r.get('version')=='fa3_wgmma': res[(d['d'],d['b'],d['s'],d['causal'],d['bin'])].append(r['tflops'])
for rd in (1,2):
    for l in open(f'{O}/peer{rd}.jsonl'):
        d=json.loads(l); peer[(d['dim'],d['batch'],d['seqlen'],d['causal'])].append(d['cudnn_tflops'])
for k in sorted(peer):
    o=res[k+('O',)]; n=res[k+('N',)]; c=peer[k]
    om,nm,cm=sum(o)/len(o),sum(n)/len(n),sum(c)/len(c)
    print(f"d{k[0]} B{k[1]} S{k[2]} {'causal' if k[3] else 'full  '} old {om:6.1f} new {nm:6.1f} {[round(x,1) for x in n]} cuDNN {cm:6.1f} {c} new/old {nm/om:.3f} new/cuDNN {nm/cm:.3f} old/cuDNN {om/cm:.3f}")
PYEOF
