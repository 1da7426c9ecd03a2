#!/usr/bin/env bash
# Session 5 closing checks on the H100 host (binary of e497f5e): GEMM and MoE quick verification
# (common/mbarrier.cuh gained a function; attention was verified in final2), then cold compile of
# every variant on this host's CPU (kiln check, all cores; CPU median of the compiling threads), a
# serial sample of fa3_wgmma (its kernel grew this session), and the warm start.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export KILN_STORE=$OUT/kiln.db
B=.carry/lead/kiln-final; chmod +x $B
{ nproc; nvidia-smi -L; lscpu | grep "Model name"; date -u; echo "commit e497f5e"; } > $OUT/machine.txt
{
KILN_CACHE_DIR=/tmp/kc-v timeout 200 $B --no-store verify --suite quick; echo "gemm verify quick exit $?"
KILN_CACHE_DIR=/tmp/kc-v timeout 200 $B --no-store moe verify; echo "moe verify exit $?"
} > $OUT/verify.txt 2>&1
grep -E "exit|failed" $OUT/verify.txt | tail -6
KILN_CACHE_DIR=/tmp/kc-cold $B --no-store --json check > $OUT/check.json 2> $OUT/check.err
KILN_CACHE_DIR=/tmp/kc-cold $B --no-store check 2>&1 | tail -1 | tee $OUT/warm.txt
RAYON_NUM_THREADS=1 KILN_CACHE_DIR=/tmp/kc-serial $B --no-store check --version fa3_wgmma 2>&1 | tail -2 | tee $OUT/serial-fa3.txt
python3 - $OUT <<'PY'
import json, statistics as st, sys, collections
rows = [r for r in json.load(open(sys.argv[1] + "/check.json")) if not r["cached"]]
c = [r["compile_cpu_ms"] for r in rows if r.get("compile_cpu_ms") is not None]
print(f"{len(rows)} compiled, CPU median {st.median(c):.0f} ms, wall median {st.median([r['compile_ms'] for r in rows]):.0f} ms, {sum(1 for r in rows if r['problems'])} with problems")
by = collections.defaultdict(list)
for r in rows: by[r["version"]].append(r["compile_cpu_ms"])
print(" ".join(f"{k}:{st.median(v):.0f}" for k, v in sorted(by.items())))
PY
