#!/usr/bin/env bash
# --warmup-ms (kiln benches and scripts/attention_peer.py): with 1000 ms of warm-up every launch
# should take the sustained (power-capped) time, as 200 warm-up launches gave (warm/): fa3_wgmma
# d256 B1 S16384 and d128 B4 S4096, kiln with 5 launches / --warmup-ms 1000, SDPA cuDNN likewise,
# alternating, twice.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-final; chmod +x $B
PY=python3; [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; } > $OUT/machine.txt
: > $OUT/runs.jsonl
for rep in 1 2; do for s in "1 16384 256" "4 4096 128"; do set -- $s; for w in 0 1000; do
  r=$($B --no-store --json attn bench --batch $1 --heads 16 --seqlen $2 --dim $3 --version fa3_wgmma --reps 30 --warmup-ms $w 2>/dev/null | tr -d '\n')
  p=$(timeout 120 $PY scripts/attention_peer.py --reps 30 --warmup-ms $w --shapes "$1,16,$2,$3" 2>/dev/null | tr -d '\n')
  echo "{\"rep\":$rep,\"d\":$3,\"s\":$2,\"warmup_ms\":$w,\"kiln\":${r:-null},\"peer\":${p:-null}}" >> $OUT/runs.jsonl
done; done; done
python3 - $OUT <<'PY'
import json,sys
for l in open(sys.argv[1]+'/runs.jsonl'):
    d=json.loads(l); k=d['kiln'][0] if d['kiln'] else {}; p=d['peer'] or {}
    print(f"rep{d['rep']} d{d['d']} S{d['s']} warmup_ms {d['warmup_ms']}: kiln {k.get('tflops',0):.0f} TF (min {k.get('min_ms',0):.3f} med {k.get('median_ms',0):.3f} max {k.get('max_ms',0):.3f}) cuDNN {p.get('cudnn_tflops',0):.0f} TF")
PY
