#!/usr/bin/env bash
# Session 13 run 16: cold compile on the GPU host (issue 4), the session's final registry:
# every variant 16 at a time (fresh JIT cache), simt_tiled and wgmma_tma_ws's 128x192 tile one at
# a time, then the warm start. Binary e22ed66 (code of 33e1268).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
B=.carry/s13/kiln-e22ed66; chmod +x $B
{ nvidia-smi --query-gpu=name --format=csv; lscpu | grep -E 'Model name|^CPU\(s\)'; date -u; echo "binary: e22ed66"; } > $OUT/machine.txt
KILN_CACHE_DIR=/tmp/c-all timeout 400 $B --no-store --json check > $OUT/check-all.json 2> $OUT/check-all.err; echo "all rc $?"
for i in 1 2 3; do KILN_CACHE_DIR=/tmp/c-all timeout 60 $B --no-store check 2>&1 | tail -1; done | tee $OUT/warm.txt
RAYON_NUM_THREADS=1 KILN_CACHE_DIR=/tmp/c-st timeout 200 $B --no-store check --version simt_tiled 2>&1 | tail -1 | tee $OUT/serial-simt_tiled.txt
python3 - $OUT/check-all.json <<'PY' | tee $OUT/summary.txt
import json, sys, statistics as st, collections
rows = json.load(open(sys.argv[1]))
rows = rows.get('rows', rows) if isinstance(rows, dict) else rows
cpu = [r['compile_cpu_ms'] for r in rows if r.get('compile_cpu_ms')]
wall = [r['compile_ms'] for r in rows if r.get('compile_ms')]
print(f"{len(rows)} rows; median CPU {st.median(cpu):.0f} ms, median wall {st.median(wall):.0f} ms; problems: {sum(1 for r in rows if r.get('problems'))}")
by = collections.defaultdict(list)
for r in rows:
    if r.get('compile_cpu_ms'): by[r.get('version')].append(r['compile_cpu_ms'])
for v, x in sorted(by.items(), key=lambda kv: st.median(kv[1])): print(f"  {v:16} {len(x):4} variants, CPU median {st.median(x):.0f} ms")
sub = lambda pred: [r['compile_cpu_ms'] for r in rows if r.get('compile_cpu_ms') and pred(r['variant'])]
for name, pred in [("ws 128x192", lambda v: 'KILN_BN=192' in v), ("ws ping-pong", lambda v: v.startswith('wgmma_tma_ws_pingpong')), ("pack_rows", lambda v: v.startswith('pack_rows'))]:
    x = sub(pred); print(f"  {name:16} {len(x):4} variants, CPU median {st.median(x):.0f} ms" if x else f"  {name}: none")
PY
gzip $OUT/check-all.json
