#!/usr/bin/env bash
# Causal work-item order: groups of G (batch, head) pairs, heaviest blocks first across a group
# (G=1: the previous head-after-head order). Full attention verify with the default (G=8), then
# G in {1,4,8,16} at the nine causal issue shapes, two alternating rounds, SDPA cuDNN in each.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=$OUT/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-order; chmod +x $B
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
timeout 300 $B --no-store attn verify > $OUT/verify-attn.txt 2>&1; echo "attn verify (full) exit $?"; tail -3 $OUT/verify-attn.txt
: > $OUT/order.jsonl
for round in 1 2; do
  for g in 1 4 8 16; do
    for d in 128 64 256; do for bs in "4 4096" "2 8192" "1 16384"; do set -- $bs
      r=$(env KILN_FA3_D$d=order=$g timeout 60 $B --no-store --json attn bench --batch $1 --heads 16 --seqlen $2 --dim $d --causal --version fa3_wgmma --reps 20 --warmup 5 2>>$OUT/bench.err | tr -d '\n')
      echo "{\"round\":$round,\"g\":$g,\"d\":$d,\"b\":$1,\"s\":$2,\"rows\":${r:-null}}" >> $OUT/order.jsonl
    done; done
  done
  timeout 240 $PY scripts/attention_peer.py --reps 20 --shapes "4,16,4096,128,causal;2,16,8192,128,causal;1,16,16384,128,causal;4,16,4096,64,causal;2,16,8192,64,causal;1,16,16384,64,causal;4,16,4096,256,causal;2,16,8192,256,causal;1,16,16384,256,causal" > $OUT/peer$round.jsonl 2>>$OUT/peer.err
done
$PY - $OUT <<'PYEOF'
import json,sys,collections
O=sys.argv[1]
res=collections.defaultdict(list); peer=collections.defaultdict(list)
for l in open(O+'/order.jsonl'):
    d=json.loads(l)
    for r in (d['rows'] or []):
        if r.get('version')=='fa3_wgmma': res[(d['d'],d['b'],d['s'],d['g'])].append(r['tflops'])
for rd in (1,2):
    for l in open(f'{O}/peer{rd}.jsonl'):
        d=json.loads(l); peer[(d['dim'],d['batch'],d['seqlen'])].append(d['cudnn_tflops'])
for k in sorted(peer):
    c=peer[k]; cm=sum(c)/len(c)
    line=f"d{k[0]} B{k[1]} S{k[2]} causal cuDNN {cm:6.1f} {c} |"
    base=sum(res[k+(1,)])/len(res[k+(1,)])
    for g in (1,4,8,16):
        v=res[k+(g,)]; m=sum(v)/len(v); line+=f" G{g} {m:6.1f} ({m/base:.3f}, x{m/cm:.3f}) {[round(x) for x in v]}"
    print(line)
PYEOF
