#!/usr/bin/env bash
# Session 7: the 64-row tile configs of wgmma_tma_ws (both consumers on one 64-row tile, K blocks
# alternating; rows64 = 64x128, rows64-tiny = 64x64, rows64-tiny-pair = 64x64 in CTA pairs
# multicasting B). (1) quick verify suite with each forced; (2) small shapes, default vs each, two
# rounds, rotated order, cuBLAS in the same process.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/lead/kiln-s7b; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; echo "binary: session 7 working tree on 08dd455 (rows64 configs)"; } > $OUT/machine.txt
CFGS="default rows64 rows64-tiny rows64-tiny-pair"
for cfg in rows64 rows64-tiny rows64-tiny-pair; do
  KILN_WGMMA_CFG=$cfg timeout 300 $B --no-store verify --suite quick --version wgmma_tma_ws > $OUT/verify-$cfg.txt 2>&1; echo "verify $cfg exit $?" | tee -a $OUT/verify.txt
  tail -2 $OUT/verify-$cfg.txt >> $OUT/verify.txt
  for sh in 2048x2048x2048 1000x3000x700 4096x4096x128; do for l in RC CR; do
    KILN_WGMMA_CFG=$cfg timeout 100 $B --no-store verify --shape $sh --layout $l --version wgmma_tma_ws >> $OUT/verify-$cfg.txt 2>&1; echo "verify $cfg $sh $l exit $?" | tee -a $OUT/verify.txt
  done; done
done
SHAPES="512x512x512 1024x1024x1024 2048x2048x2048 128x4096x4096 128x4096x14336 128x14336x4096 512x4096x4096 512x4096x14336 256x4096x4096"
: > $OUT/bench.jsonl
for round in 1 2; do
  for s in $SHAPES; do
    set -- $CFGS; if [ $round = 2 ]; then CF="$4 $3 $2 $1"; else CF="$CFGS"; fi
    for cfg in $CF; do
      if [ $cfg = default ]; then E=""; else E="KILN_WGMMA_CFG=$cfg"; fi
      echo -n "{\"cfg\": \"$cfg\", \"r\": " >> $OUT/bench.jsonl
      env $E $B --no-store --json bench --shape $s --version wgmma_tma_ws --reps 50 --warmup-ms 100 2>>$OUT/err.txt | tr -d '\n' >> $OUT/bench.jsonl; echo "}" >> $OUT/bench.jsonl
    done
  done
done
python3 - $OUT/bench.jsonl <<'PY' | tee $OUT/bench.txt
import json, sys, collections, statistics as st
t = collections.defaultdict(list)
for l in open(sys.argv[1]):
    l = l.strip()
    if not l: continue
    try: o = json.loads(l)
    except Exception as e: print('bad line', l[:200]); continue
    for r in o['r']:
        p = r['problem']; key = f"{p['m']}x{p['n']}x{p['k']}"
        v = r['versions'][0]
        t[(key, o['cfg'])].append((v[0]['median_ms'] * 1000, r['vendor']['median_ms'] * 1000, v[1]))
shapes = []
for k in t:
    if k[0] not in shapes: shapes.append(k[0])
print(f"{'shape':16s} " + " ".join(f"{c:>22s}" for c in ['default', 'rows64', 'rows64-tiny', 'rows64-tiny-pair']))
for s in shapes:
    row = []
    for c in ['default', 'rows64', 'rows64-tiny', 'rows64-tiny-pair']:
        x = t.get((s, c), [])
        if not x: row.append(f"{'-':>22s}"); continue
        us = st.median([a for a, _, _ in x]); ratio = st.median([r for _, _, r in x])
        row.append(f"{us:8.2f}us {ratio:.3f}x({len(x)})")
    print(f"{s:16s} " + " ".join(row))
PY
