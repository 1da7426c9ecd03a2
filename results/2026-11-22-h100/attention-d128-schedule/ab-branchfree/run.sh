#!/usr/bin/env bash
# A/B: fa3_wgmma before (kiln) and after (kiln-new) the branch-free overlap step, alternating
# rounds, with SDPA cuDNN between; quick verify of the new binary first.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=$OUT/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
chmod +x .carry/lead/kiln .carry/lead/kiln-new
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
N=.carry/lead/kiln-new; O=.carry/lead/kiln
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; git log -1 --format=%H; date -u; } > $OUT/machine.txt
timeout 200 $N --no-store attn verify --suite quick > $OUT/verify-attn.txt 2>&1; echo "verify exit $?"; tail -2 $OUT/verify-attn.txt
SHAPES="2 8192 128 -;4 4096 128 -;1 16384 128 -;2 8192 128 --causal;4 4096 128 --causal;4 4096 64 --causal;2 8192 256 -"
: > $OUT/ab.jsonl
for round in 1 2; do
  for bin in O N; do B=${!bin}
    IFS=';'; for sh in $SHAPES; do IFS=' '; set -- $sh; c=$4; [ "$c" = "-" ] && c=""
      r=$(timeout 60 $B --no-store --json attn bench --batch $1 --heads 16 --seqlen $2 --dim $3 $c --version fa3_wgmma --reps 20 --warmup 5 2>>$OUT/bench.err | tr -d '\n')
      echo "{\"round\":$round,\"bin\":\"$bin\",\"b\":$1,\"s\":$2,\"d\":$3,\"causal\":\"$4\",\"rows\":${r:-null}}" >> $OUT/ab.jsonl
    done; IFS=' '
  done
  timeout 200 $PY scripts/attention_peer.py --reps 20 --shapes "2,16,8192,128;4,16,4096,128;1,16,16384,128;2,16,8192,128,causal;4,16,4096,128,causal;4,16,4096,64,causal;2,16,8192,256" > $OUT/peer$round.jsonl 2>>$OUT/peer.err
done
$PY - $OUT <<'PYEOF'
import json,sys,collections
O=sys.argv[1]
res=collections.defaultdict(list)
for l in open(O+'/ab.jsonl'):
    d=json.loads(l)
    if not d['rows']: continue
    rows=d['rows'] if isinstance(d['rows'],list) else d['rows'].get('rows',[])
    for r in rows:
        if r.get('version')=='fa3_wgmma': res[(d['b'],d['s'],d['d'],d['causal']=='--causal',d['bin'])].append(r.get('tflops'))
peer=collections.defaultdict(list)
for rd in (1,2):
    try:
        for l in open(f'{O}/peer{rd}.jsonl'):
            d=json.loads(l); peer[(d['batch'],d['seqlen'],d['dim'],d['causal'])].append(d.get('cudnn_tflops') or d.get('cudnn'))
    except Exception as e: print('peer',e)
keys=sorted({k[:4] for k in res})
for k in keys:
    o=res.get(k+('O',),[]); n=res.get(k+('N',),[]); c=peer.get(k,[])
    cm=sum(c)/len(c) if c and None not in c else float('nan')
    om=sum(o)/len(o) if o else float('nan'); nm=sum(n)/len(n) if n else float('nan')
    print(f"B{k[0]} S{k[1]} d{k[2]} {'causal' if k[3] else 'full  '}  old {om:6.1f} {o}  new {nm:6.1f} {n}  cuDNN {cm:6.1f} {c}  new/old {nm/om:.3f}  new/cuDNN {nm/cm:.3f}")
PYEOF
