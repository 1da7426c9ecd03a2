#!/usr/bin/env bash
# d128 configurations through KILN_FA3_D128 (no code change): the work counter for non-causal
# problems, lazy rescaling, and the landscape's 192-row (3 consumer) configs; alternating rounds
# with SDPA cuDNN; each config verified (quick suite, d128) before it is timed.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=$OUT/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln; chmod +x $B
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; git log -1 --format=%H; date -u; } > $OUT/machine.txt
CFGS="default|dynamic=2|dynamic=2,lazy=8|cwg=3,bn=128,stages=2,overlap=0,emu=8,dynamic=2,lazy=8|cwg=3,bn=128,stages=2,overlap=0,emu=0,dynamic=2,lazy=8"
IFS='|'; for c in $CFGS; do [ "$c" = default ] && continue
  KILN_FA3_D128=$c timeout 120 $B --no-store attn verify --suite quick --dim 128 > "$OUT/verify-$c.txt" 2>&1; echo "verify $c exit $?"; tail -1 "$OUT/verify-$c.txt"
done; IFS=' '
SHAPES="2 8192 -;4 4096 -;1 16384 -;2 8192 --causal"
: > $OUT/cfg.jsonl
for round in 1 2; do
  IFS='|'; for c in $CFGS; do IFS=' '
    for sh in "2 8192 -" "4 4096 -" "1 16384 -" "2 8192 --causal"; do set -- $sh; cz=$3; [ "$cz" = "-" ] && cz=""
      if [ "$c" = default ]; then r=$(timeout 60 $B --no-store --json attn bench --batch $1 --heads 16 --seqlen $2 --dim 128 $cz --version fa3_wgmma --reps 20 --warmup 5 2>>$OUT/bench.err | tr -d '\n')
      else r=$(KILN_FA3_D128=$c timeout 60 $B --no-store --json attn bench --batch $1 --heads 16 --seqlen $2 --dim 128 $cz --version fa3_wgmma --reps 20 --warmup 5 2>>$OUT/bench.err | tr -d '\n'); fi
      echo "{\"round\":$round,\"cfg\":\"$c\",\"b\":$1,\"s\":$2,\"causal\":\"$3\",\"rows\":${r:-null}}" >> $OUT/cfg.jsonl
    done; IFS='|'
  done; IFS=' '
  timeout 200 $PY scripts/attention_peer.py --reps 20 --shapes "2,16,8192,128;4,16,4096,128;1,16,16384,128;2,16,8192,128,causal" > $OUT/peer$round.jsonl 2>>$OUT/peer.err
done
$PY - $OUT <<'PYEOF'
import json,sys,collections
O=sys.argv[1]
res=collections.defaultdict(list)
for l in open(O+'/cfg.jsonl'):
    d=json.loads(l)
    for r in (d['rows'] or []):
        if r.get('version')=='fa3_wgmma': res[(d['b'],d['s'],d['causal']=='--causal',d['cfg'])].append(r['tflops'])
peer=collections.defaultdict(list)
for rd in (1,2):
    for l in open(f'{O}/peer{rd}.jsonl'):
        d=json.loads(l); peer[(d['batch'],d['seqlen'],d['causal'])].append(d['cudnn_tflops'])
for k in sorted(peer):
    c=peer[k]; cm=sum(c)/len(c)
    print(f"B{k[0]} S{k[1]} {'causal' if k[2] else 'full'}: cuDNN {cm:.1f} {c}")
    for (b,s,cz,cfg),v in sorted(res.items()):
        if (b,s,cz)==k: m=sum(v)/len(v); print(f"    {cfg:58} {m:6.1f} {[round(x,1) for x in v]}  x cuDNN {m/cm:.3f}")
PYEOF
