#!/usr/bin/env bash
# Session 11 run 1: is kiln's extra ~1 us at 512^3 the shared-memory carveout? The same binary
# with shallower rings (KILN_WGMMA_STAGES) at small shapes, rotated rounds; cuBLAS in each process.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=/tmp/kiln.db KILN_CACHE_DIR=/tmp/kiln-jit
B=.carry/s11/kiln; chmod +x $B
{ nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; date -u; cat .carry/s11/commit; } > $OUT/machine.txt
timeout 60 $B --no-store verify --shape 512 > $OUT/verify.txt 2>&1; echo "verify rc $?"
for s in 4 3; do KILN_WGMMA_STAGES=$s timeout 60 $B --no-store verify --shape 512 >> $OUT/verify.txt 2>&1; echo "verify stages $s rc $?"; done
: > $OUT/ab.jsonl
V="d 3 4 8"
for round in 1 2 3; do
  for shape in 512 1024 128x4096x4096 512x4096x4096; do
    for v in $V; do
      E=""; [ $v != d ] && E="KILN_WGMMA_STAGES=$v"
      r=$(env $E timeout 120 $B --no-store bench --shape $shape --layout RC --reps 60 --json 2>>$OUT/err.txt)
      echo "{\"shape\":\"$shape\",\"v\":\"$v\",\"round\":$round,\"r\":$r}" >> $OUT/ab.jsonl
    done
  done
  set -- $V; V="$2 $3 $4 $1"
done
python3 - $OUT/ab.jsonl <<'PY' | tee $OUT/summary.txt
import sys, json, collections, statistics as st
t = collections.defaultdict(list)
for l in open(sys.argv[1]):
    try: d = json.loads(l)
    except Exception: continue
    r = d["r"]; r = r[0] if isinstance(r, list) else r
    k = r["versions"][0][0]["median_ms"]; c = r["vendor"]["median_ms"]
    t[(d["shape"], d["v"])].append((k * 1e3, c * 1e3))
for (s, v), x in sorted(t.items()):
    print(f"{s:16s} stages {v:2s} kiln us {st.median(a for a,_ in x):7.2f} cublas us {st.median(b for _,b in x):7.2f} ratio {st.median(b/a for a,b in x):.3f}  {[round(b/a,3) for a,b in x]}")
PY
