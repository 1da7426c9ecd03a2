#!/usr/bin/env bash
# Halved last wave (fa3_wgmma, ledger #18): verification of the new binary (full suite, then
# problems whose last wave is halved: more items than SMs, the rest at most half a wave), then
# head (52bd51d) / split (fcf6d52) / halves alternating with SDPA cuDNN, three rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=$OUT/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
L=.carry/lead; chmod +x $L/kiln-*
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; } > $OUT/machine.txt
B=$L/kiln-halves
V="timeout 120 $B --no-store attn verify --version fa3_wgmma"
{
$V; echo "full exit $?"
for d in 128 64; do
  $V --batch 1 --heads 8 --seqlen 4096 --dim $d; echo "B1 H8 S4096 (176 items: 44 halved, 8 ragged split) d$d exit $?"
  $V --batch 2 --heads 16 --seqlen 1000 --dim $d; echo "B2 H16 S1000 (192 items: 60 halved) d$d exit $?"
  $V --batch 3 --heads 16 --kv-heads 4 --seqlen-q 1000 --seqlen-kv 777 --dim $d --layout BHSD --dtype f16; echo "B3 GQA S1000x777 BHSD f16 (288 items: 24 halved) d$d exit $?"
  $V --batch 2 --heads 16 --seqlen 1000 --dim $d --causal; echo "B2 H16 S1000 causal d$d exit $?"
  env KILN_FA3_D$d=dynamic=0 $V --batch 2 --heads 16 --seqlen 1000 --dim $d; echo "B2 H16 S1000 static d$d exit $?"
done
} > $OUT/verify.txt 2>&1
grep -E "exit" $OUT/verify.txt
SH="128 4 4096 -;128 2 8192 -;128 1 16384 -;128 2 8192 --causal;64 2 8192 -;64 1 16384 -"
PS="4,16,4096,128;2,16,8192,128;1,16,16384,128;2,16,8192,128,causal;2,16,8192,64;1,16,16384,64"
: > $OUT/bench.jsonl
for round in 1 2 3; do
  for bin in head split halves; do
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
bins=("head","split","halves")
res=collections.defaultdict(list); peer=collections.defaultdict(list)
for l in open(O+'/bench.jsonl'):
    d=json.loads(l)
    for r in (d['rows'] or []):
        if r.get('version')=='fa3_wgmma': res[(d['d'],d['b'],d['s'],d['causal'],d['bin'])].append(r['tflops'])
for rd in (1,2,3):
    for l in open(f'{O}/peer{rd}.jsonl'):
        d=json.loads(l); peer[(d['dim'],d['batch'],d['seqlen'],d['causal'])].append(d['cudnn_tflops'])
print("shape | cuDNN | head | split | halves | halves/split | halves/cuDNN")
for s in sorted({k[:4] for k in res}):
    c=st.median(peer[s]) if peer[s] else float('nan')
    m={b: st.median(res[s+(b,)]) if res[s+(b,)] else float('nan') for b in bins}
    print(f"d{s[0]} B{s[1]} S{s[2]} {'causal' if s[3] else 'full'} | {c:.1f} {[round(x,1) for x in peer[s]]} | {m['head']:.1f} | {m['split']:.1f} | {m['halves']:.1f} {[round(x,1) for x in res[s+('halves',)]]} | {m['halves']/m['split']:.3f} | {m['halves']/c:.3f}")
PYEOF
