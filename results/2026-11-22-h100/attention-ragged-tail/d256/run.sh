#!/usr/bin/env bash
# d256 with the work counter (ledger #20): its producer/consumer split moved from 24/240 to 40/232
# registers so that the counter fits. Verification of d256 with the counter, then final (14394d3,
# static order, 24/240) / new static / new counter always / new counter causal-only, alternating
# with SDPA cuDNN, three rounds; TFLOPS of the median and of the fastest launch.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=$OUT/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
L=.carry/lead; chmod +x $L/kiln-*
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; } > $OUT/machine.txt
B=$L/kiln-d256
V="timeout 120 $B --no-store attn verify --version fa3_wgmma"
{
env KILN_FA3_D256=dynamic=2 $V --dim 256; echo "d256 suite, counter exit $?"
$V --dim 256; echo "d256 suite, static (40/232) exit $?"
env KILN_FA3_D256=dynamic=2 $V --batch 1 --heads 9 --seqlen 2048 --dim 256; echo "B1 H9 S2048 thirds, counter exit $?"
env KILN_FA3_D256=dynamic=2 $V --batch 2 --heads 16 --kv-heads 8 --seqlen-q 1100 --seqlen-kv 900 --dim 256 --layout BHSD --dtype f16; echo "GQA 1100x900 BHSD f16, counter exit $?"
env KILN_FA3_D256=dynamic=2 $V --batch 2 --heads 16 --seqlen 1000 --dim 256 --causal; echo "B2 S1000 causal, counter exit $?"
} > $OUT/verify.txt 2>&1
grep -E "exit" $OUT/verify.txt
SH="256 4 4096 -;256 2 8192 -;256 1 16384 -;256 4 4096 --causal;256 2 8192 --causal;256 1 16384 --causal"
PS="4,16,4096,256;2,16,8192,256;1,16,16384,256;4,16,4096,256,causal;2,16,8192,256,causal;1,16,16384,256,causal"
: > $OUT/bench.jsonl
for round in 1 2 3; do
  for v in final:kiln-final: static:kiln-d256: dyn2:kiln-d256:dynamic=2 dyn1:kiln-d256:dynamic=1; do
    IFS=: read name bin cfg <<< "$v"
    IFS=';'; for sh in $SH; do IFS=' '; set -- $sh; c=$4; [ "$c" = "-" ] && c=""
      r=$(env KILN_FA3_D256=$cfg timeout 60 $L/$bin --no-store --json attn bench --batch $2 --heads 16 --seqlen $3 --dim $1 $c --version fa3_wgmma --reps 20 --warmup 5 2>>$OUT/bench.err | tr -d '\n')
      echo "{\"round\":$round,\"bin\":\"$name\",\"d\":$1,\"b\":$2,\"s\":$3,\"causal\":$([ -n "$c" ] && echo true || echo false),\"rows\":${r:-null}}" >> $OUT/bench.jsonl
    done; IFS=' '
  done
  timeout 200 $PY scripts/attention_peer.py --reps 20 --shapes "$PS" > $OUT/peer$round.jsonl 2>>$OUT/peer.err
done
$PY - $OUT <<'PYEOF'
import json,sys,collections,statistics as st
O=sys.argv[1]
bins=("final","static","dyn2","dyn1")
res=collections.defaultdict(list); best=collections.defaultdict(list); peer=collections.defaultdict(list)
for l in open(O+'/bench.jsonl'):
    d=json.loads(l)
    for r in (d['rows'] or []):
        k=(d['d'],d['b'],d['s'],d['causal'],d['bin']); res[k].append(r['tflops']); best[k].append(r['tflops']*r['median_ms']/r['min_ms'])
for rd in (1,2,3):
    for l in open(f'{O}/peer{rd}.jsonl'):
        d=json.loads(l); peer[(d['dim'],d['batch'],d['seqlen'],d['causal'])].append(d['cudnn_tflops'])
print("shape | cuDNN | " + " | ".join(f"{b} (fastest launch)" for b in bins) + " | dyn2/final | dyn2/cuDNN")
for s in sorted({k[:4] for k in res}):
    c=st.median(peer[s]); m={b: st.median(res[s+(b,)]) for b in bins}
    print(f"d{s[0]} B{s[1]} S{s[2]} {'causal' if s[3] else 'full'} | {c:.1f} | " + " | ".join(f"{m[b]:.1f} {[round(x) for x in res[s+(b,)]]} ({max(best[s+(b,)]):.0f})" for b in bins) + f" | {m['dyn2']/m['final']:.3f} | {m['dyn2']/c:.3f}")
PYEOF
