#!/usr/bin/env bash
# Session 8 (h): cold compile of the whole registry on the H100 host (main 4979624 kernels =
# 710f58b's): kiln check with a fresh JIT cache, 16 compiles at a time (CPU time per compile is
# what one compile costs), then the warm start.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
B=.carry/lead/kiln-s8c-head; chmod +x $B
{ nvidia-smi --query-gpu=name --format=csv; date -u; nproc; lscpu | grep -i 'model name'; echo "main 710f58b"; } > $OUT/machine.txt
export KILN_CACHE_DIR=/tmp/jit-cold
rm -rf $KILN_CACHE_DIR
timeout 400 $B --no-store --json check > $OUT/check-cold.json 2> $OUT/check-cold.err; echo "cold rc $?"; tail -2 $OUT/check-cold.err
timeout 100 $B --no-store check > /tmp/warm.txt 2>&1; tail -2 /tmp/warm.txt | tee $OUT/check-warm.txt
python3 - $OUT/check-cold.json <<'PY' | tee $OUT/summary.txt
import json, sys, statistics as st, collections
d = json.load(open(sys.argv[1])); by = collections.defaultdict(list)
cpu = [r['compile_cpu_ms'] for r in d if r.get('compile_cpu_ms')]
for r in d:
    if r.get('compile_cpu_ms'): by[r['version']].append(r['compile_cpu_ms'])
print(f"{len(cpu)} variants compiled: CPU median {st.median(cpu):.0f} ms")
for v, x in sorted(by.items(), key=lambda kv: st.median(kv[1])): print(f"  {v:16s} {len(x):4d} {st.median(x):7.0f}")
PY
