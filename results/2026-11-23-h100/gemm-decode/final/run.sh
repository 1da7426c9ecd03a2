#!/usr/bin/env bash
# Session 14 run 9: the session's final binary (50d4904; read flush, flushed cuBLAS selection, A box
# trimmed to M, the 64 < M < 104 rule). Full suite and sanitize; issue 3's target set in all four
# layouts; decode-sized M in RC and CC.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
F=.carry/s14/kiln-f; chmod +x $F
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: 50d4904"; } > $OUT/machine.txt
timeout 300 $F --no-store verify --version wgmma_tma_ws --suite full > $OUT/verify.txt 2>&1; echo "verify full rc $?: $(grep -E '^\| wgmma_tma_ws ' $OUT/verify.txt | tail -1)"
timeout 200 $F --no-store sanitize --version wgmma_tma_ws --timeout 100 > $OUT/sanitize.txt 2>&1; echo "sanitize rc $?"; tail -1 $OUT/sanitize.txt
$F --no-store peak > $OUT/peak.txt 2>&1; cat $OUT/peak.txt
$F --no-store --json bench --set targets --layouts RC,CR,RR,CC --reps 30 > $OUT/targets.json 2>>$OUT/err.txt
python3 - $OUT/targets.json <<'PY' | tee $OUT/targets.txt
import json, sys, math, collections
rows = json.load(open(sys.argv[1])); t = collections.defaultdict(dict); order = []
for r in rows:
    p = r['problem']; k = f"{p['m']}x{p['n']}x{p['k']}"
    if k not in order: order.append(k)
    t[p['layout']][k] = r['versions'][0][1]
ls = [l for l in ('RC', 'CR', 'RR', 'CC') if l in t]
print(f"{'shape':18s} " + " ".join(f"{l:>6s}" for l in ls))
for k in order: print(f"{k:18s} " + " ".join(f"{t[l].get(k, float('nan')):6.3f}" for l in ls))
for l in ls:
    g = list(t[l].values())
    print(f"{l}: geomean {math.exp(sum(map(math.log, g)) / len(g)):.3f}, lowest {min(g):.3f}, under 0.95: {sum(1 for x in g if x < 0.95)}")
allg = [x for l in ls for x in t[l].values()]
print(f"all: geomean {math.exp(sum(map(math.log, allg)) / len(allg)):.3f}, under 0.95: {sum(1 for x in allg if x < 0.95)}")
PY
: > $OUT/decode.jsonl
for s in 1x4096x4096 8x4096x4096 16x4096x4096 32x4096x4096 64x4096x4096 72x4096x4096 96x4096x4096 128x4096x4096 8x14336x4096 16x4096x14336 96x4096x14336; do
  for l in RC CC; do
    echo "{\"shape\":\"$s $l\"}" >> $OUT/decode.jsonl
    timeout 60 $F --no-store --json bench --shape $s --layout $l --reps 30 >> $OUT/decode.jsonl 2>>$OUT/err.txt
  done
done
python3 - $OUT/decode.jsonl <<'PY' | tee $OUT/decode.txt
import json, sys
txt = open(sys.argv[1]).read(); dec = json.JSONDecoder(); i = 0; tag = None
while i < len(txt):
    while i < len(txt) and txt[i].isspace(): i += 1
    if i >= len(txt): break
    o, i = dec.raw_decode(txt, i)
    if isinstance(o, dict) and 'shape' in o and len(o) == 1: tag = o['shape']; continue
    r = o[0] if isinstance(o, list) else o
    k = r['versions'][0][0]['median_ms'] * 1e3; v = r['vendor']['median_ms'] * 1e3
    print(f"{tag:20s} kiln {k:7.2f} us  cublas {v:7.2f} us  ratio {v/k:6.3f}")
PY
