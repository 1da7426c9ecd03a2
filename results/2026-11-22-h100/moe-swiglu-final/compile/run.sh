#!/usr/bin/env bash
# Session 10 run 10: cold compile on the GPU host (issue 4): the whole registry 16 at a time, then
# mma_sync and swiglu_dual one at a time (fresh JIT caches), then the warm start.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
B=.carry/s10/kiln-h; chmod +x $B
{ nvidia-smi --query-gpu=name --format=csv; lscpu | grep -E 'Model name|^CPU\(s\)'; date -u; cat .carry/s10/commit-h; } > $OUT/machine.txt
KILN_CACHE_DIR=/tmp/c-all timeout 280 $B --no-store --json check > $OUT/check-all.json 2> $OUT/check-all.err; echo "all rc $?"
KILN_CACHE_DIR=/tmp/c-all timeout 60 $B --no-store check 2>&1 | tail -2 | tee $OUT/warm.txt
for v in mma_sync swiglu_dual; do
  RAYON_NUM_THREADS=1 KILN_CACHE_DIR=/tmp/c-$v timeout 200 $B --no-store check --version $v 2>&1 | tail -1 | tee $OUT/serial-$v.txt
done
python3 - $OUT/check-all.json <<'PY' | tee $OUT/summary.txt
import json, sys, statistics as st, collections
rows = json.load(open(sys.argv[1]))
rows = rows.get('rows', rows) if isinstance(rows, dict) else rows
cpu = [r.get('compile_cpu_ms') for r in rows if r.get('compile_cpu_ms')]
wall = [r.get('compile_ms') for r in rows if r.get('compile_ms')]
print(f"{len(rows)} rows; median CPU {st.median(cpu):.0f} ms, median wall {st.median(wall):.0f} ms" if cpu and wall else f"keys: {list(rows[0].keys()) if rows else None}")
by = collections.defaultdict(list)
for r in rows:
    if r.get('compile_cpu_ms'): by[r.get('version')].append(r['compile_cpu_ms'])
for v, x in sorted(by.items(), key=lambda kv: st.median(kv[1])): print(f"  {v:16} {len(x):4} variants, CPU median {st.median(x):.0f} ms")
PY
