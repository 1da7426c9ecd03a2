#!/usr/bin/env bash
# Sustained load, old vs new: is kiln's drop at S 4096 under a second of warm-up (sustained/) new
# with this session's kernels? fa3_wgmma of 52bd51d (session 4) and of the current binary, both
# with warm-up launches covering ~1 s (1300 at d128 B4 S4096, 700 at d256), SDPA cuDNN with
# --warmup-ms 1000, alternating, two rounds.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
L=.carry/lead; chmod +x $L/kiln-*
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; } > $OUT/machine.txt
: > $OUT/runs.jsonl
for round in 1 2; do for s in "128 1300" "256 700"; do set -- $s
  for bin in s4 final; do
    r=$(timeout 90 $L/kiln-$bin --no-store --json attn bench --batch 4 --heads 16 --seqlen 4096 --dim $1 --version fa3_wgmma --reps 30 --warmup $2 2>>$OUT/err.txt | tr -d '\n')
    echo "{\"round\":$round,\"d\":$1,\"who\":\"$bin\",\"r\":${r:-null}}" >> $OUT/runs.jsonl
  done
  p=$(timeout 120 $PY scripts/attention_peer.py --reps 30 --warmup-ms 1000 --shapes "4,16,4096,$1" 2>>$OUT/err.txt | tr -d '\n')
  echo "{\"round\":$round,\"d\":$1,\"who\":\"cudnn\",\"p\":${p:-null}}" >> $OUT/runs.jsonl
done; done
python3 - $OUT <<'PY'
import json,sys
for l in open(sys.argv[1]+'/runs.jsonl'):
    d=json.loads(l)
    if d['who']=='cudnn': print(f"round {d['round']} d{d['d']} cuDNN {d['p']['cudnn_tflops'] if d['p'] else 0:.0f} TF")
    else:
        x=d['r'][0] if d['r'] else {}
        print(f"round {d['round']} d{d['d']} {d['who']} {x.get('tflops',0):.0f} TF (min {x.get('min_ms',0):.3f} med {x.get('median_ms',0):.3f})")
PY
