#!/usr/bin/env bash
# Sustained load without the L2 flush between timed launches (both sides: kiln --no-flush,
# attention_peer.py --no-flush), so the timed launches keep the warm-up's power and clock instead
# of ramping up (session6/d256-bimodal/); the weakest sustained shapes, three rounds alternating.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-idle; chmod +x $B
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv; date -u; cat .carry/lead/commit-idle; } > $OUT/machine.txt
for d in 128 256; do for c in "" "--causal"; do $B --no-store attn bench --batch 1 --heads 16 --seqlen 1024 --dim $d $c --version fa3_wgmma --reps 2 --warmup 1 >/dev/null 2>&1; done; done
: > $OUT/noflush.jsonl
SH="128 4 4096 -;256 2 8192 --causal;256 4 4096 --causal;128 2 8192 -"
for round in 1 2 3; do
  IFS=';'; for sh in $SH; do IFS=' '; set -- $sh; c=$4; [ "$c" = "-" ] && c=""; pc=""; [ -n "$c" ] && pc=",causal"
    r=$(timeout 90 $B --no-store --json attn bench --batch $2 --heads 16 --seqlen $3 --dim $1 $c --version fa3_wgmma --reps 30 --warmup-ms 1000 --no-flush 2>>$OUT/err.txt | tr -d '\n')
    p=$(timeout 120 $PY scripts/attention_peer.py --backends cudnn --no-flush --reps 30 --warmup-ms 1000 --shapes "$2,16,$3,$1$pc" 2>>$OUT/err.txt | tr -d '\n')
    echo "{\"round\":$round,\"d\":$1,\"b\":$2,\"s\":$3,\"causal\":$([ -n "$c" ] && echo true || echo false),\"kiln\":${r:-null},\"peer\":${p:-null}}" >> $OUT/noflush.jsonl
  done; IFS=' '
done
python3 - $OUT/noflush.jsonl <<'PY' | tee $OUT/noflush.txt
import json, sys, collections, statistics as st
k = collections.defaultdict(list); p = collections.defaultdict(list); dr = collections.defaultdict(list)
for l in open(sys.argv[1]):
    d = json.loads(l); key = (d['d'], d['b'], d['s'], d['causal'])
    if d['kiln']:
        r = d['kiln'][0]; k[key].append(r['tflops']); t = r['times_ms']; dr[key].append(('k', t[0] / t[-1]))
    if d['peer'] and 'cudnn_tflops' in d['peer']:
        p[key].append(d['peer']['cudnn_tflops']); t = d['peer']['cudnn_times_ms']; dr[key].append(('c', t[0] / t[-1]))
print("sustained, no L2 flush (1000 ms timed warm-up), TFLOPS: kiln rounds | cuDNN rounds | median ratio | first/last launch time")
for key in sorted(k):
    f = st.median(k[key]); c = st.median(p[key]) if p[key] else float('nan')
    print(f"d{key[0]} B{key[1]} S{key[2]} {'causal' if key[3] else 'full  '}: {[round(x) for x in k[key]]} | {[round(x) for x in p[key]]} | {f / c:.3f} | {' '.join(f'{w}{x:.2f}' for w, x in dr[key])}")
PY
