#!/usr/bin/env bash
# Every attention version (composed, fa2_mma_sync, fa3_wgmma) at the 18 issue shapes, one round,
# then SDPA cuDNN/FA2 on the same shapes: the README's all-versions columns.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=$OUT/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-order2; chmod +x $B
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
: > $OUT/bench.jsonl
shapes=""; for d in 128 64 256; do for c in "" ",causal"; do for bs in 4,4096 2,8192 1,16384; do shapes="$shapes;${bs%,*},16,${bs#*,},$d$c"; done; done; done
for d in 128 64 256; do for c in "" "--causal"; do for bs in "4 4096" "2 8192" "1 16384"; do set -- $bs
  r=$(timeout 120 $B --no-store --json attn bench --batch $1 --heads 16 --seqlen $2 --dim $d $c --reps 10 --warmup 3 2>>$OUT/bench.err | tr -d '\n')
  echo "{\"b\":$1,\"s\":$2,\"d\":$d,\"causal\":$([ -n "$c" ] && echo true || echo false),\"rows\":${r:-null}}" >> $OUT/bench.jsonl
done; done; done
timeout 240 $PY scripts/attention_peer.py --reps 10 --shapes "${shapes#;}" > $OUT/peer.jsonl 2>>$OUT/peer.err
$PY - $OUT <<'PYEOF'
import json,sys
O=sys.argv[1]
peer={}
for l in open(O+'/peer.jsonl'):
    d=json.loads(l); peer[(d['dim'],d['batch'],d['seqlen'],d['causal'])]=d
for l in open(O+'/bench.jsonl'):
    d=json.loads(l); v={r['version']:r['tflops'] for r in (d['rows'] or [])}; p=peer.get((d['d'],d['b'],d['s'],d['causal']),{})
    print(f"| {d['d']} | B{d['b']} S{d['s']}{' causal' if d['causal'] else ''} | {v.get('composed',0):.1f} | {v.get('fa2_mma_sync',0):.1f} | {v.get('fa3_wgmma',0):.1f} | {p.get('cudnn_tflops',0):.1f} | {p.get('flash_tflops',0):.1f} |")
PYEOF
