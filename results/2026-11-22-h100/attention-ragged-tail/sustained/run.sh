#!/usr/bin/env bash
# Sustained load: kiln (fa3_wgmma defaults) and SDPA cuDNN both after --warmup-ms 1000 (a second
# of load before the 30 timed launches), the six d128 issue shapes and the tightest d64/d256
# ones, alternating, three rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-final; chmod +x $B
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; } > $OUT/machine.txt
SH="128 4 4096 -;128 2 8192 -;128 1 16384 -;128 4 4096 --causal;128 2 8192 --causal;128 1 16384 --causal;64 4 4096 -;256 4 4096 -"
: > $OUT/runs.jsonl
for round in 1 2 3; do
  IFS=';'; for sh in $SH; do IFS=' '; set -- $sh; c=$4; [ "$c" = "-" ] && c=""; pc=""; [ -n "$c" ] && pc=",causal"
    r=$(timeout 90 $B --no-store --json attn bench --batch $2 --heads 16 --seqlen $3 --dim $1 $c --version fa3_wgmma --reps 30 --warmup-ms 1000 2>>$OUT/err.txt | tr -d '\n')
    p=$(timeout 120 $PY scripts/attention_peer.py --reps 30 --warmup-ms 1000 --shapes "$2,16,$3,$1$pc" 2>>$OUT/err.txt | tr -d '\n')
    echo "{\"round\":$round,\"d\":$1,\"b\":$2,\"s\":$3,\"causal\":$([ -n "$c" ] && echo true || echo false),\"kiln\":${r:-null},\"peer\":${p:-null}}" >> $OUT/runs.jsonl
  done; IFS=' '
done
python3 - $OUT <<'PY'
import json,sys,collections,statistics as st
k=collections.defaultdict(list); p=collections.defaultdict(list)
for l in open(sys.argv[1]+'/runs.jsonl'):
    d=json.loads(l); key=(d['d'],d['b'],d['s'],d['causal'])
    if d['kiln']: k[key].append(d['kiln'][0]['tflops'])
    if d['peer']: p[key].append(d['peer']['cudnn_tflops'])
for key in sorted(k):
    f=st.median(k[key]); c=st.median(p[key])
    print(f"d{key[0]} B{key[1]} S{key[2]} {'causal' if key[3] else 'full'}: kiln {f:.0f} {[round(x) for x in k[key]]} cuDNN {c:.0f} {[round(x) for x in p[key]]} x {f/c:.3f}")
PY
