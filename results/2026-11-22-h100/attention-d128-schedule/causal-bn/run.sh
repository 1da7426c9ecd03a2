#!/usr/bin/env bash
# d128 causal: narrower key tiles (less of the diagonal tile wasted) with the 192-row schedule,
# through KILN_FA3_D128, two alternating rounds with SDPA cuDNN; each config verified first.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=$OUT/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-align; chmod +x $B
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
CFGS="default|bn=96|bn=96,stages=3|bn=80,stages=3"
IFS='|'; for c in $CFGS; do [ "$c" = default ] && continue
  KILN_FA3_D128=$c timeout 120 $B --no-store attn verify --suite quick --dim 128 > /tmp/v.txt 2>&1; echo "verify $c exit $?"; tail -1 /tmp/v.txt
done; IFS=' '
: > $OUT/cfg.jsonl
for round in 1 2; do
  IFS='|'; for c in $CFGS; do IFS=' '
    for sh in "4 4096" "2 8192" "1 16384"; do set -- $sh
      if [ "$c" = default ]; then r=$(timeout 60 $B --no-store --json attn bench --batch $1 --heads 16 --seqlen $2 --dim 128 --causal --version fa3_wgmma --reps 20 --warmup 5 2>>$OUT/bench.err | tr -d '\n')
      else r=$(KILN_FA3_D128=$c timeout 60 $B --no-store --json attn bench --batch $1 --heads 16 --seqlen $2 --dim 128 --causal --version fa3_wgmma --reps 20 --warmup 5 2>>$OUT/bench.err | tr -d '\n'); fi
      echo "{\"round\":$round,\"cfg\":\"$c\",\"b\":$1,\"s\":$2,\"rows\":${r:-null}}" >> $OUT/cfg.jsonl
    done; IFS='|'
  done; IFS=' '
  timeout 200 $PY scripts/attention_peer.py --reps 20 --shapes "4,16,4096,128,causal;2,16,8192,128,causal;1,16,16384,128,causal" > $OUT/peer$round.jsonl 2>>$OUT/peer.err
done
$PY - $OUT <<'PYEOF'
import json,sys,collections
O=sys.argv[1]
res=collections.defaultdict(list); peer=collections.defaultdict(list)
for l in open(O+'/cfg.jsonl'):
    d=json.loads(l)
    for r in (d['rows'] or []):
        if r.get('version')=='fa3_wgmma': res[(d['b'],d['s'],d['cfg'])].append(r['tflops'])
for rd in (1,2):
    for l in open(f'{O}/peer{rd}.jsonl'):
        d=json.loads(l); peer[(d['batch'],d['seqlen'])].append(d['cudnn_tflops'])
for k in sorted(peer):
    c=peer[k]; cm=sum(c)/len(c); print(f"B{k[0]} S{k[1]} causal: cuDNN {cm:.1f} {c}")
    for (b,s,cfg),v in sorted(res.items()):
        if (b,s)==k: m=sum(v)/len(v); print(f"    {cfg:16} {m:6.1f} {[round(x,1) for x in v]}  x cuDNN {m/cm:.3f}")
PYEOF
