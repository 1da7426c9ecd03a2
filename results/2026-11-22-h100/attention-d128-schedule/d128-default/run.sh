#!/usr/bin/env bash
# Session 4: the new d128 default (192x128, 3 consumers, 2 stages, no overlap, counter, lazy)
# against the old one (KILN_FA3_D128 override), two attributions, and SDPA cuDNN, all six
# issue shapes, alternating rounds; the new default verified first (d128 full suite).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=$OUT/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-new; chmod +x $B
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; git log -1 --format=%H; date -u; } > $OUT/machine.txt
timeout 200 $B --no-store attn verify --dim 128 > $OUT/verify-d128.txt 2>&1; echo "verify d128 exit $?"; tail -3 $OUT/verify-d128.txt
timeout 150 $B --no-store attn verify --suite quick > $OUT/verify-quick.txt 2>&1; echo "verify quick exit $?"; tail -2 $OUT/verify-quick.txt
CFGS="default|old:bn=128,cwg=2,stages=3,overlap=1,persist=1,dynamic=1,lazy=0|lazy=0|dynamic=1"
: > $OUT/cfg.jsonl
for round in 1 2; do
  IFS='|'; for c in $CFGS; do IFS=' '
    env=${c#old:}
    for sh in "4 4096 -" "2 8192 -" "1 16384 -" "4 4096 --causal" "2 8192 --causal" "1 16384 --causal"; do set -- $sh; cz=$3; [ "$cz" = "-" ] && cz=""
      if [ "$c" = default ]; then r=$(timeout 60 $B --no-store --json attn bench --batch $1 --heads 16 --seqlen $2 --dim 128 $cz --version fa3_wgmma --reps 20 --warmup 5 2>>$OUT/bench.err | tr -d '\n')
      else r=$(KILN_FA3_D128=$env timeout 60 $B --no-store --json attn bench --batch $1 --heads 16 --seqlen $2 --dim 128 $cz --version fa3_wgmma --reps 20 --warmup 5 2>>$OUT/bench.err | tr -d '\n'); fi
      echo "{\"round\":$round,\"cfg\":\"$c\",\"b\":$1,\"s\":$2,\"causal\":\"$3\",\"rows\":${r:-null}}" >> $OUT/cfg.jsonl
    done; IFS='|'
  done; IFS=' '
  timeout 200 $PY scripts/attention_peer.py --reps 20 --shapes "4,16,4096,128;2,16,8192,128;1,16,16384,128;4,16,4096,128,causal;2,16,8192,128,causal;1,16,16384,128,causal" > $OUT/peer$round.jsonl 2>>$OUT/peer.err
done
$PY - $OUT <<'PYEOF'
import json,sys,collections
O=sys.argv[1]
res=collections.defaultdict(list)
for l in open(O+'/cfg.jsonl'):
    d=json.loads(l)
    for r in (d['rows'] or []):
        if r.get('version')=='fa3_wgmma': res[(d['b'],d['s'],d['causal']=='--causal',d['cfg'].split(':')[0])].append(r['tflops'])
peer=collections.defaultdict(list)
for rd in (1,2):
    for l in open(f'{O}/peer{rd}.jsonl'):
        d=json.loads(l); peer[(d['batch'],d['seqlen'],d['causal'])].append(d['cudnn_tflops'])
for k in sorted(peer):
    c=peer[k]; cm=sum(c)/len(c)
    print(f"B{k[0]} S{k[1]} {'causal' if k[2] else 'full'}: cuDNN {cm:.1f} {c}")
    for (b,s,cz,cfg),v in sorted(res.items()):
        if (b,s,cz)==k: m=sum(v)/len(v); print(f"    {cfg:10} {m:6.1f} {[round(x,1) for x in v]}  x cuDNN {m/cm:.3f}")
PYEOF
